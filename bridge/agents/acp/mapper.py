"""ACP `session/update` notifications into the contract's messages, for one attempt."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import orjson

from bridge.agents.mapping import MAX_INVALID_SAMPLE_CHARS, Handler, MapperCore
from bridge.agents.values import Out, RunOptions
from bridge.contract import ErrorInfo, ErrorKind

log = logging.getLogger(__name__)

_STOP_REASONS: Final = {"end_turn": "stop", "max_tokens": "length", "max_turn_requests": "length"}
#: Read by the live client (live.py keeps the session's options and commands), not a run's output.
_KNOWN: Final = frozenset(
    {
        "user_message_chunk",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
    }
)
_PLAN_STATUSES: Final = frozenset({"pending", "in_progress", "completed"})
_PRIORITIES: Final = frozenset({"high", "medium", "low"})
#: ACP's prompt `usage` -> the contract's `Usage`.
_USAGE_FIELDS: Final = {
    "inputTokens": "input",
    "outputTokens": "output",
    "cachedReadTokens": "cacheRead",
    "cachedWriteTokens": "cacheWrite",
    "totalTokens": "totalTokens",
}


def _text(content: Any) -> str:
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


class AcpEventMapper(MapperCore):
    """Maps one attempt of an ACP agent; `agent` names it in the bridge's texts."""

    clean_exit: ClassVar[str] = "without answering the prompt"

    def __init__(self, options: RunOptions, agent: str, classify: Any) -> None:
        super().__init__(options)
        self.agent = agent  # type: ignore[misc]
        self._classify = classify
        self._tool_output: dict[str, list[str]] = {}
        #: The context window as the agent's last `usage_update` gave it (terminal.completed's).
        self._context: dict[str, Any] = {}

    def feed(self, line: bytes) -> list[Out]:
        """A `session/update` line as the agent wrote it, or one of the client's own lines."""
        if line.startswith(b'{"jsonrpc"') or b'"method"' in line[:64]:
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.note_invalid(line[:MAX_INVALID_SAMPLE_CHARS].decode("utf-8", "replace"))
                return []
            if self._last_terminal is not None:
                return []
            params = message.get("params") if isinstance(message, dict) else None
            update = params.get("update") if isinstance(params, dict) else None
            if not isinstance(update, dict):
                self.note_invalid(line[:MAX_INVALID_SAMPLE_CHARS].decode("utf-8", "replace"))
                return []
            return self._update(update)
        return super().feed(line)

    def _update(self, update: dict[str, Any]) -> list[Out]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _text(update.get("content"))
            if not text:
                return []
            return [*self._flush_thought(), self._text_out(text)]
        if kind == "agent_thought_chunk":
            text = _text(update.get("content"))
            return self._thought(text) if text else []
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        if kind == "plan":
            return _plan(update)
        if kind == "usage_update":
            self._note_context(update)
            return []
        if kind not in _KNOWN:
            self._note_unknown(str(kind))
        return []

    def _tool_call(self, update: dict[str, Any]) -> list[Out]:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str):
            return []
        if call_id in self._open_tools:  # already streamed from its permission request (live.py)
            return self._tool_update(update)
        out = self._open_tool(call_id, _tool_name(update), update.get("rawInput"))
        status = update.get("status")
        if status in ("completed", "failed"):
            out += self._close_tool(call_id, update)
        return out

    def _tool_update(self, update: dict[str, Any]) -> list[Out]:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str):
            return []
        out: list[Out] = []
        if call_id not in self._open_tools:
            out += self._open_tool(call_id, _tool_name(update), update.get("rawInput"))
        meta = update.get("_meta")
        terminal = meta.get("terminal_output") if isinstance(meta, dict) else None
        if isinstance(terminal, dict) and isinstance(terminal.get("data"), str):
            self._tool_output.setdefault(call_id, []).append(terminal["data"])
        if update.get("status") in ("completed", "failed"):
            out += self._close_tool(call_id, update)
        return out

    def _close_tool(self, call_id: str, update: dict[str, Any]) -> list[Out]:
        name = self._open_tools.pop(call_id, None)
        if name is None:
            return []
        output = _content_text(update.get("content")) or "".join(self._tool_output.pop(call_id, []))
        if not output and update.get("rawOutput") is not None:
            raw = update["rawOutput"]
            output = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
        if update.get("status") == "failed":
            out = [self._tool_failed(call_id, name, output or "the tool failed")]
        else:
            out = [Out("tool.completed", {"toolCallId": call_id, "name": name, "output": output})]
        return [*out, *self._flush_thought()]

    def _prompt_end(self, event: dict[str, Any]) -> list[Out]:
        error = event.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return self._stop_failed(
                ErrorInfo(kind="model", message=f"{self.agent} failed the prompt: {message}", retryable=True)
            )
        reason = str(event.get("stopReason") or "end_turn")
        if reason == "refusal":
            return self._stop_failed(
                ErrorInfo(kind="model", message=f"{self.agent} refused the prompt", retryable=False)
            )
        return self._complete(
            _STOP_REASONS.get(reason, reason), {**_usage(event.get("usage")), **self._context}
        )

    def _note_context(self, update: dict[str, Any]) -> None:
        """`usage_update` (tokens in the context, its size, the session's cost so far)."""
        used, size = update.get("used"), update.get("size")
        if isinstance(used, int) and isinstance(size, int) and size > 0:
            percent = round(100.0 * used / size, 2)
            self._context["contextUsage"] = {"tokens": used, "contextWindow": size, "percent": percent}
        cost = update.get("cost")
        amount = cost.get("amount") if isinstance(cost, dict) else None
        if isinstance(amount, int | float) and not isinstance(amount, bool):
            self._context["sessionCost"] = float(amount)

    def _session(self, event: dict[str, Any]) -> list[Out]:
        return self._start_session(event.get("id"), event.get("cwd", ""), {})

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        """terminal.failed for an agent process that ended before it answered the prompt."""
        classified: tuple[ErrorKind, bool] = self._classify(exit_code, signal_name, stderr)
        return self._fail_exited(exit_code, signal_name, stderr, classified)

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        """A line over the bound: counted, nothing mapped from its head."""
        self.note_invalid(description)
        return []

    handlers: ClassVar[Mapping[str, Handler]] = {"prompt_end": _prompt_end, "session": _session}
    ignored: ClassVar[frozenset[str]] = frozenset({"settled"})


def _plan(update: dict[str, Any]) -> list[Out]:
    """ACP's `plan` (the whole plan each time) -> the contract's plan message, as pi's `todo` tool
    and Claude Code's task list give it."""
    entries: list[dict[str, Any]] = []
    for entry in update.get("entries") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            continue
        status = entry.get("status")
        mapped: dict[str, Any] = {
            "content": entry["content"],
            "status": status if status in _PLAN_STATUSES else "pending",
        }
        if entry.get("priority") in _PRIORITIES:
            mapped["priority"] = entry["priority"]
        entries.append(mapped)
    return [Out("plan", {"entries": entries})]


def _usage(usage: Any) -> dict[str, Any]:
    """The prompt answer's `usage` as terminal.completed's (nothing when the agent gave none)."""
    if not isinstance(usage, dict):
        return {}
    mapped = {
        ours: usage[theirs] for theirs, ours in _USAGE_FIELDS.items() if isinstance(usage.get(theirs), int)
    }
    return {"usage": mapped} if mapped else {}


def _tool_name(update: dict[str, Any]) -> str:
    """The agent's own tool name where it says it (`_meta`), else the call's kind or title."""
    meta = update.get("_meta")
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    name = claude.get("toolName") if isinstance(claude, dict) else None
    if isinstance(name, str) and name:
        return name
    for key in ("kind", "title"):
        value = update.get(key)
        if isinstance(value, str) and value:
            return "bash" if value == "execute" else value
    return "tool"


def _content_text(content: Any) -> str:
    """The text of a tool call's content blocks (`{"type": "content", "content": {text}}`)."""
    if not isinstance(content, list):
        return ""
    return "".join(
        _text(part.get("content"))
        for part in content
        if isinstance(part, dict) and part.get("type") == "content"
    )
