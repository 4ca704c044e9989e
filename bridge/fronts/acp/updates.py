"""ACP v1 mapping: the bridge's message stream, history and options as the SDK's schema models
(a live text chunk, the hot path, as the dict its model serializes to); pure, no I/O."""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin

from acp import schema
from pydantic import BaseModel, ValidationError

from bridge.contract import (
    MAX_IMAGES,
    CompactedContent,
    CompactingContent,
    FileDiff,
    NoticeContent,
    PlanContent,
    PlanEntry,
    PromptImage,
    RenamedContent,
    RunRetryingContent,
    RunSteeredContent,
    SessionHistory,
    TerminalCompletedContent,
    ToolCallContent,
    ToolCompletedContent,
    ToolFailedContent,
    ToolUpdateContent,
    Usage,
)
from bridge.runs.registry import AgentOption, OpenedConversation

Update = (
    schema.UserMessageChunk
    | schema.AgentMessageChunk
    | schema.AgentThoughtChunk
    | schema.ToolCallStart
    | schema.ToolCallProgress
    | schema.UsageUpdate
    | schema.CurrentModeUpdate
    | schema.ConfigOptionUpdate
    | schema.AvailableCommandsUpdate
    | schema.SessionInfoUpdate
    | schema.AgentPlanUpdate
)
# An update already in its wire form (camelCase keys, no nulls), sent as is.
WireUpdate = dict[str, Any]
ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]

MODEL_OPTION: Final = "model"
THOUGHT_OPTION: Final = "thought_level"
_KINDS: Final[dict[str, ToolKind]] = {
    "read": "read",
    "edit": "edit",
    "write": "edit",
    "bash": "execute",
    "grep": "search",
    "find": "search",
    "ls": "search",
}
# pi's stopReason of a finished turn -> ACP's; anything else is a normal end of turn.
_STOP_REASONS: Final[dict[str, StopReason]] = {
    "length": "max_tokens",
    "refusal": "refusal",
    "content_filter": "refusal",
    "sensitive": "refusal",
}


def text_block(text: str) -> schema.TextContentBlock:
    """A text content block."""
    return schema.TextContentBlock(type="text", text=text)


def text_chunk(kind: Literal["agent_message_chunk", "agent_thought_chunk"], text: str) -> WireUpdate:
    """A live answer or thought chunk, as `schema.AgentMessageChunk` / `AgentThoughtChunk` with a
    text block serialize."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def stop_reason_of(pi_stop_reason: str | None) -> StopReason:
    """ACP's stopReason for pi's stopReason of a completed run."""
    return _STOP_REASONS.get(pi_stop_reason or "stop", "end_turn")


# --------------------------------------------------------------------------- prompts


def prompt_text(blocks: Sequence[Any]) -> str:
    """pi's prompt from ACP content blocks: text as is, embedded files quoted with their path,
    links to files named (pi reads them itself with its tools)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, schema.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, schema.EmbeddedResourceContentBlock):
            resource = block.resource
            path = _path_of(resource.uri)
            if isinstance(resource, schema.TextResourceContents):
                fence = "````" if "```" in resource.text else "```"
                parts.append(f"{path}:\n{fence}\n{resource.text}\n{fence}")
            else:
                parts.append(f"[binary file {path} ({resource.mime_type or 'unknown type'}), not included]")
        elif isinstance(block, schema.ResourceContentBlock):
            parts.append(f"[file: {_path_of(block.uri)}]")
    return "\n\n".join(part for part in parts if part)


def prompt_images(blocks: Sequence[Any]) -> list[PromptImage]:
    """The image blocks of an ACP prompt as the images of pi's prompt. Raises ValueError naming
    the block that is not one (a type pi cannot take, data that is not base64, a link only)."""
    images: list[PromptImage] = []
    for index, block in enumerate(blocks):
        if not isinstance(block, schema.ImageContentBlock):
            continue
        if not block.data:
            raise ValueError(f"prompt[{index}]: an image must carry its data (a uri alone is not read)")
        try:
            images.append(PromptImage(mime_type=block.mime_type, data=block.data))  # type: ignore[arg-type]
        except ValidationError as exc:
            reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"prompt[{index}]: {reasons}") from None
    if len(images) > MAX_IMAGES:
        raise ValueError(f"prompt: {len(images)} images, at most {MAX_IMAGES} go with one prompt")
    return images


def _path_of(uri: str) -> str:
    if uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(uri).path)
    return uri


# --------------------------------------------------------------------------- tools


def tool_kind(name: str) -> ToolKind:
    """ACP's tool kind of a pi tool."""
    return _KINDS.get(name, "other")


def tool_title(name: str, arguments: dict[str, Any]) -> str:
    """What the tool works on: bash's command, a file tool's path, a search's pattern."""
    if name == "bash" and isinstance(arguments.get("command"), str):
        return str(arguments["command"])
    pattern = arguments.get("pattern")
    path = arguments.get("path")
    if isinstance(pattern, str):
        return f"{pattern} in {path}" if isinstance(path, str) else pattern
    if isinstance(path, str):
        return path
    return name


def tool_locations(name: str, arguments: dict[str, Any], cwd: str) -> list[schema.ToolCallLocation]:
    """The file a tool reads or changes, absolute, with the line where known."""
    path = arguments.get("path")
    if name not in ("read", "edit", "write") or not isinstance(path, str) or not path:
        return []
    offset = arguments.get("offset")
    line = offset if isinstance(offset, int) and offset >= 1 else None
    return [schema.ToolCallLocation(path=os.path.join(cwd, path), line=line)]


def _output_content(text: str) -> list[schema.ContentToolCallContent]:
    return [schema.ContentToolCallContent(type="content", content=text_block(text))] if text else []


def tool_call_start(call_id: str, name: str, arguments: dict[str, Any], cwd: str) -> schema.ToolCallStart:
    """The `tool_call` update that opens a tool call."""
    return schema.ToolCallStart(
        session_update="tool_call",
        tool_call_id=call_id,
        title=tool_title(name, arguments),
        kind=tool_kind(name),
        status="pending",
        locations=tool_locations(name, arguments, cwd) or None,
        raw_input=arguments,
    )


def plan_update(entries: Sequence[PlanEntry]) -> schema.AgentPlanUpdate:
    """ACP's `plan` update: the agent's whole plan (an entry without a priority is `medium`,
    which ACP requires and the agents that plan do not say)."""
    return schema.AgentPlanUpdate(
        session_update="plan",
        entries=[
            schema.PlanEntry(content=entry.content, status=entry.status, priority=entry.priority or "medium")
            for entry in entries
        ],
    )


#: What a tool call shows: its output, an edit's diff, the client's terminal it ran in.
ToolContent = schema.ContentToolCallContent | schema.FileEditToolCallContent | schema.TerminalToolCallContent


def terminal_content(terminal_id: str) -> schema.TerminalToolCallContent:
    """A client's terminal shown in a tool call (the command runs there)."""
    return schema.TerminalToolCallContent(type="terminal", terminal_id=terminal_id)


def tool_finished(
    call_id: str,
    *,
    failed: bool,
    output: str,
    diff: FileDiff | None,
    cwd: str,
    terminal_id: str | None = None,
) -> schema.ToolCallProgress:
    """The `tool_call_update` that closes a tool call: its output, an edit's diff, and the
    client's terminal it ran in (kept shown)."""
    content: list[
        schema.ContentToolCallContent | schema.FileEditToolCallContent | schema.TerminalToolCallContent
    ] = []
    if terminal_id is not None:
        content.append(terminal_content(terminal_id))
    locations = None
    if diff is not None and diff.new_text is not None:
        path = os.path.join(cwd, diff.path)
        content.append(
            schema.FileEditToolCallContent(
                type="diff", path=path, old_text=diff.old_text, new_text=diff.new_text
            )
        )
        locations = [schema.ToolCallLocation(path=path, line=diff.line)]
    content.extend(_output_content(output))
    return schema.ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=call_id,
        status="failed" if failed else "completed",
        content=content or None,
        locations=locations,
        raw_output={"output": output},
    )


# --------------------------------------------------------------------------- live prompts

_Content = TypeVar("_Content", bound=BaseModel)


def read(model: type[_Content], content: dict[str, Any]) -> _Content:
    """A message's content as its contract model, trusted as the mapper made it (strict mode and
    the mappers' tests check it against the contract): typed fields, no validation per message."""
    values = dict(content)
    for key, nested in _nested_models(model):
        raw = values.get(key)
        if isinstance(raw, dict):
            values[key] = read(nested, raw)
        elif isinstance(raw, list):
            values[key] = [read(nested, item) if isinstance(item, dict) else item for item in raw]
    return model.model_construct(**values)


@functools.cache
def _nested_models(model: type[BaseModel]) -> tuple[tuple[str, type[BaseModel]], ...]:
    """The wire keys of `model`'s fields that hold a model, a list of one, or None, with that model."""
    found: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        for option in _options(info.annotation):
            if isinstance(option, type) and issubclass(option, BaseModel):
                found.append((info.alias or name, option))
    return tuple(found)


def _options(annotation: Any) -> tuple[Any, ...]:
    """The types an annotation allows, a list's items for the list (`list[X] | None`: X, None)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return tuple(option for arg in get_args(annotation) for option in _options(arg))
    if origin is list:
        return get_args(annotation)
    return (annotation,)


class PromptMapper:
    """Turns one run's pi/message payloads into ACP session updates (in order)."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.text = ""
        self.terminal: dict[str, Any] | None = None
        self._in_progress: set[str] = set()
        #: The client's terminal each tool call runs in (ACP `terminal/create`), by call id.
        self.terminals: dict[str, str] = {}

    def _progress(self, call_id: str, output: str) -> schema.ToolCallProgress:
        """A running tool's output so far. Run in the client's terminal, the terminal shows it:
        the terminal stays the content, and the agent's own view is the update's rawOutput."""
        self._in_progress.add(call_id)
        terminal_id = self.terminals.get(call_id)
        if terminal_id is not None:
            return schema.ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=call_id,
                status="in_progress",
                content=[terminal_content(terminal_id)],
                raw_output={"output": output},
            )
        return schema.ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=call_id,
            status="in_progress",
            content=_output_content(output) or None,
        )

    def _tool(self, kind: str, content: dict[str, Any]) -> Update:
        """The update of one tool message: its call opened, its progress, or its end."""
        if kind == "tool.call":
            call = read(ToolCallContent, content)
            start = tool_call_start(call.tool_call_id, call.name, call.arguments, self.cwd)
            parent = call.parent_tool_call_id
            if parent:  # a subagent's call: ACP has no field for it, so the bridge's _meta says
                start.field_meta = {"piBridge": {"parentToolCallId": parent}}
            return start
        if kind == "tool.update":
            update = read(ToolUpdateContent, content)
            return self._progress(update.tool_call_id, update.output)
        if kind == "tool.failed":
            failed = read(ToolFailedContent, content)
            return self._finished(failed.tool_call_id, failed.error, None, failed=True)
        done = read(ToolCompletedContent, content)
        return self._finished(done.tool_call_id, done.output, done.diff, failed=False)

    def _finished(self, call_id: str, output: str, diff: FileDiff | None, *, failed: bool) -> Update:
        terminal_id = self.terminals.pop(call_id, None)
        return tool_finished(
            call_id, failed=failed, output=output, diff=diff, cwd=self.cwd, terminal_id=terminal_id
        )

    def feed(self, payload: dict[str, Any]) -> list[Update | WireUpdate]:
        """The updates for one pi/message (none for lifecycle messages ACP has no place for).

        Each content is read as its contract model, but for the text chunks (the hot path)."""
        kind = payload.get("type")
        content = payload.get("content") or {}
        if kind == "assistant":
            self.text += content["text"]
            return [text_chunk("agent_message_chunk", content["text"])]
        if kind == "assistant.thought":
            return [text_chunk("agent_thought_chunk", content["text"])]
        if kind in ("tool.call", "tool.update", "tool.completed", "tool.failed"):
            return [self._tool(kind, content)]
        if kind == "plan":
            return [plan_update(read(PlanContent, content).entries)]
        if kind in ("run.retrying", "notice", "session.compacting", "session.compacted"):
            return [bridge_note(kind, content)]
        if kind == "session.renamed":
            title = read(RenamedContent, content).title
            return [schema.SessionInfoUpdate(session_update="session_info_update", title=title)]
        if kind == "run.steered":
            steer = text_block(read(RunSteeredContent, content).text)
            return [schema.UserMessageChunk(session_update="user_message_chunk", content=steer)]
        if kind in ("terminal.completed", "terminal.failed", "terminal.cancelled"):
            self.terminal = payload
            if kind != "terminal.completed":
                return []
            usage = usage_update(read(TerminalCompletedContent, content))
            return [usage] if usage is not None else []
        return []


def bridge_note(kind: str, content: dict[str, Any]) -> schema.AgentMessageChunk:
    """A line of the bridge's own in the answer, its content in `_meta.piBridge`: a retry's
    attempt, or a `notice` (an extension's notify, a dialog nobody could answer)."""
    if kind == "notice":
        notice = read(NoticeContent, content)
        note = f"\n[pi-bridge: {notice.level}: {notice.text}]\n"
        meta = {"piBridge": {"notice": content}}
    elif kind == "session.compacting":
        reason = read(CompactingContent, content).reason
        note = f"\n[pi-bridge: compacting the conversation ({reason})]\n"
        meta = {"piBridge": {"compacting": content}}
    elif kind == "session.compacted":
        note = f"\n[pi-bridge: {compaction_line(read(CompactedContent, content))}]\n"
        meta = {"piBridge": {"compacted": content}}
    else:
        retry = read(RunRetryingContent, content)
        note = f"\n[pi-bridge: attempt {retry.attempt} in {retry.delay_ms} ms, after: {retry.reason}]\n"
        meta = {"piBridge": {"retrying": content}}
    return schema.AgentMessageChunk(
        session_update="agent_message_chunk", content=text_block(note), field_meta=meta
    )


def compaction_line(compacted: CompactedContent) -> str:
    """What a compaction did, in words: its sizes, or why it did not happen."""
    if compacted.error:
        return f"the compaction did not happen: {compacted.error}"
    before, after = compacted.tokens_before, compacted.tokens_after
    if before is not None and after is not None:
        return f"conversation compacted: {before:,} → about {after:,} tokens"
    return "conversation compacted"


def usage_update(done: TerminalCompletedContent) -> schema.UsageUpdate | None:
    """`usage_update` from a completed run's contextUsage and the session's cost."""
    context = done.context_usage
    if context is None:
        return None
    cost = done.session_cost
    return schema.UsageUpdate(
        session_update="usage_update",
        used=context.tokens or 0,
        size=context.context_window,
        cost=schema.Cost(amount=float(cost), currency="USD") if cost is not None else None,
    )


def prompt_usage(usage: Usage | None) -> schema.Usage | None:
    """The prompt answer's token usage from pi's."""
    if usage is None:
        return None
    return schema.Usage(
        total_tokens=usage.total_tokens,
        input_tokens=usage.input,
        output_tokens=usage.output,
        cached_read_tokens=usage.cache_read,
        cached_write_tokens=usage.cache_write,
    )


# --------------------------------------------------------------------------- history


def history_updates(history: SessionHistory, cwd: str) -> Iterable[Update]:
    """A stored session replayed as the updates its prompts streamed (session/load)."""
    for turn in history.turns:
        yield schema.UserMessageChunk(session_update="user_message_chunk", content=text_block(turn.prompt))
        names: dict[str, str] = {}
        for message in turn.messages:
            if message.type == "assistant":
                yield schema.AgentMessageChunk(
                    session_update="agent_message_chunk", content=text_block(message.content.text)
                )
            elif message.type == "assistant.thought":
                yield schema.AgentThoughtChunk(
                    session_update="agent_thought_chunk", content=text_block(message.content.text)
                )
            elif message.type == "tool.call":
                call = message.content
                names[call.tool_call_id] = call.name
                yield tool_call_start(call.tool_call_id, call.name, call.arguments, cwd)
            elif message.type == "tool.completed":
                done = message.content
                yield tool_finished(
                    done.tool_call_id, failed=False, output=done.output, diff=done.diff, cwd=cwd
                )
            elif message.type == "tool.failed":
                yield tool_finished(
                    message.content.tool_call_id,
                    failed=True,
                    output=message.content.error,
                    diff=None,
                    cwd=cwd,
                )


# --------------------------------------------------------------------------- options


def model_value(provider: str | None, model: str | None) -> str:
    """A model's option value: `provider/model` ("" for an agent that did not say its model:
    Gemini CLI's session names none, and runs its settings' own)."""
    if not model:
        return ""
    return f"{provider}/{model}" if provider else model


def config_options(
    opened: OpenedConversation, model: str, thinking: str | None
) -> list[schema.SessionConfigOptionSelect]:
    """`configOptions`: the model and the thought level, from pi's models and levels."""
    models = [
        schema.SessionConfigSelectOption(value=model_value(m.provider, m.model_id), name=m.name)
        for m in opened.models
    ]
    if model and not any(option.value == model for option in models):
        models.insert(0, schema.SessionConfigSelectOption(value=model, name=model))
    options = [_select(MODEL_OPTION, "Model", "model", model, models)]
    levels = list(opened.thinking_levels)
    if levels:
        current = thinking if thinking in levels else levels[0]
        choices = [schema.SessionConfigSelectOption(value=level, name=level) for level in levels]
        options.append(_select(THOUGHT_OPTION, "Thinking", "thought_level", current, choices))
    return options


#: The prefix of an agent's own option id in the front's configOptions (beside the bridge's).
AGENT_PREFIX: Final = "agent."


def agent_config_options(options: Iterable[AgentOption]) -> list[schema.SessionConfigOptionSelect]:
    """An ACP agent's own modes and config options as configOptions `agent.<id>`, with no
    category (a client's mode and model pickers stay the bridge's): the agent's own category is
    in `_meta.piBridge.agentCategory`."""
    return [
        schema.SessionConfigOptionSelect(
            type="select",
            id=AGENT_PREFIX + option.option_id,
            name=option.name,
            field_meta={"piBridge": {"agentCategory": option.category}} if option.category else None,
            description=option.description,
            current_value=option.current,
            options=[
                schema.SessionConfigSelectOption(value=c.value, name=c.name, description=c.description)
                for c in option.choices
            ],
        )
        for option in options
    ]


def _select(
    option_id: str, name: str, category: str, current: str, choices: list[schema.SessionConfigSelectOption]
) -> schema.SessionConfigOptionSelect:
    """One select-type config option."""
    return schema.SessionConfigOptionSelect(
        type="select", id=option_id, name=name, category=category, current_value=current, options=choices
    )
