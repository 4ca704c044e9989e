"""Map Claude Code's `--output-format stream-json` lines to contract messages: pure, no I/O."""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar, Final

from bridge.agents.claude.errors import classify_exit, classify_result_error, classify_subtype
from bridge.agents.mapping import Handler, MapperCore, int_of, text_of
from bridge.agents.values import Out, RunOptions
from bridge.contract import ErrorInfo

log = logging.getLogger(__name__)

_IGNORED_SYSTEM: Final = frozenset({"status", "thinking_tokens", "compact_boundary", "hook_response"})
_IGNORED_TYPES: Final = frozenset({"rate_limit_event", "keep_alive"})
# What Claude Code writes as the result of a tool it stopped because it was interrupted (SIGINT,
# i.e. the bridge's cancel): such a close is a cancelled tool, not a failed one.
_INTERRUPTED_TOOL: Final = (
    "The user doesn't want to proceed with this tool use",
    "[Request interrupted by user",
)


def usage_of(raw: Any, cost: Any) -> dict[str, Any] | None:
    """The contract's usage from an Anthropic usage object and Claude Code's total cost."""
    if not isinstance(raw, dict):
        return None
    usage: dict[str, Any] = {
        "input": int_of(raw, "input_tokens"),
        "output": int_of(raw, "output_tokens"),
        "cacheRead": int_of(raw, "cache_read_input_tokens"),
        "cacheWrite": int_of(raw, "cache_creation_input_tokens"),
    }
    usage["totalTokens"] = sum(usage.values())
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        usage["cost"] = float(cost)
    return usage


class ClaudeEventMapper(MapperCore):
    """The `EventMapper` of one Claude Code attempt."""

    agent = "Claude Code"
    clean_exit = "without a result"
    ignored = _IGNORED_TYPES

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._streamed: dict[str, str] = {}  # message id -> text streamed as deltas
        self._blocks_text: dict[str, str] = {}  # message id -> text of its complete blocks
        self._thought_streamed: set[str] = set()
        self._message_id: str | None = None
        self._last_turn_tokens: int | None = None
        self._held_failure: ErrorInfo | None = None
        self._tasks = _TaskList()

    # ------------------------------------------------------------------ EventMapper protocol

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        self.note_invalid(description)
        # The `result` line repeats the whole answer: with a huge one it is the line over the
        # bound. Its end-of-run meaning must survive (its usage is lost with the rest).
        if head.startswith(b'{"type":"result"') and self._last_terminal is None:
            if b'"is_error":false' in head:
                return self._complete("stop", {})
            error = ErrorInfo(
                kind="model", message="Claude Code's result line was over the bound", retryable=False
            )
            return self._stop_failed(error)
        return []

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        if self._last_terminal is not None:
            return []
        if self._held_failure is not None:
            return self.finish_failed(self._held_failure)
        return self._fail_exited(exit_code, signal_name, stderr, classify_exit(exit_code, stderr))

    # ------------------------------------------------------------------ helpers

    def _emit_text(self, message_id: str, text: str) -> list[Out]:
        self._streamed[message_id] = self._streamed.get(message_id, "") + text
        self._deltas.append(text)  # what _text_out does, inline: this is the hot path
        return [Out("assistant", {"text": text})]

    # ------------------------------------------------------------------ event handlers

    def _on_system(self, event: dict[str, Any]) -> list[Out]:
        subtype = event.get("subtype")
        if subtype == "init":
            return self._on_init(event)
        if subtype == "api_retry":
            status = event.get("error_status")
            return self._own_retry(f" (HTTP {status})" if status else "")
        if subtype not in _IGNORED_SYSTEM:
            self._note_unknown(f"system/{subtype}")
        return []

    def _on_init(self, event: dict[str, Any]) -> list[Out]:
        started = self._start_session(event.get("session_id"), event.get("cwd", ""), {})
        return started + _mcp_failures(event.get("mcp_servers"))

    def _on_bridge_session(self, event: dict[str, Any]) -> list[Out]:
        """The live engine's own line naming the conversation before Claude Code's `init`."""
        return self._start_session(event.get("id"), event.get("cwd", ""), {})

    def _on_stream_event(self, event: dict[str, Any]) -> list[Out]:
        if event.get("parent_tool_use_id") is not None:
            return []  # a sub-agent's stream: its answer arrives as the Task tool's result
        raw = event.get("event")
        if not isinstance(raw, dict):
            return []
        kind = raw.get("type")
        if kind == "content_block_delta":
            delta = raw.get("delta")
            if not isinstance(delta, dict) or self._message_id is None:
                return []
            delta_type = delta.get("type")
            if delta_type == "text_delta":
                text = delta.get("text")
                return self._emit_text(self._message_id, text) if isinstance(text, str) and text else []
            if delta_type == "thinking_delta":
                thinking = delta.get("thinking")
                if not isinstance(thinking, str) or not thinking:
                    return []
                self._thought_streamed.add(self._message_id)
                return self._thought(thinking)
            return []
        if kind == "message_start":
            message = raw.get("message")
            message_id = message.get("id") if isinstance(message, dict) else None
            self._message_id = message_id if isinstance(message_id, str) else f"msg-{len(self._streamed)}"
            self._streamed.setdefault(self._message_id, "")
            return []
        if kind == "message_stop":
            return self._flush_thought()
        return []

    def _on_assistant(self, event: dict[str, Any]) -> list[Out]:
        parent = event.get("parent_tool_use_id")
        if parent is not None:
            return self._on_sub_agent_assistant(parent, event.get("message"))
        message = event.get("message")
        if not isinstance(message, dict):
            return []
        message_id = message.get("id")
        message_id = message_id if isinstance(message_id, str) else (self._message_id or "msg")
        self._note_turn_usage(message.get("usage"))
        out: list[Out] = []
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            block_type = block.get("type")
            if block_type == "text":
                out.extend(self._reconcile_text(message_id, block.get("text")))
            elif block_type == "thinking" and message_id not in self._thought_streamed:
                thinking = block.get("thinking")
                if isinstance(thinking, str) and thinking:
                    self._thought_streamed.add(message_id)
                    out.extend(self._thought(thinking))
            elif block_type == "tool_use":
                out.extend(self._on_tool_use(block))
        return out

    def _reconcile_text(self, message_id: str, text: Any) -> list[Out]:
        """A complete text block: send what the deltas did not (nothing, when they all came)."""
        if not isinstance(text, str) or not text:
            return []
        blocks = self._blocks_text.get(message_id, "") + text
        self._blocks_text[message_id] = blocks
        streamed = self._streamed.get(message_id, "")
        if len(blocks) > len(streamed) and blocks.startswith(streamed):
            return self._emit_text(message_id, blocks[len(streamed) :])
        if not blocks.startswith(streamed) and not streamed.startswith(blocks):
            log.warning("Claude Code's final text differs from its streamed deltas; kept the deltas")
        return []

    def _note_turn_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._last_turn_tokens = sum(
                int_of(usage, key)
                for key in (
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                    "output_tokens",
                )
            )

    def _on_tool_use(self, block: dict[str, Any]) -> list[Out]:
        call_id = block.get("id")
        if not isinstance(call_id, str):
            return []
        name = str(block.get("name", ""))
        out = self._open_tool(call_id, name, block.get("input"))
        if out and name == "TodoWrite":
            out.extend(_plan_of(block.get("input")))
        elif out:
            self._tasks.call(call_id, name, block.get("input"))
        return out

    def _on_sub_agent_assistant(self, parent: Any, message: Any) -> list[Out]:
        """A sub-agent's tool calls, each naming its parent; its text stays in the Task's result."""
        content = message.get("content") if isinstance(message, dict) else None
        out: list[Out] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            call_id = block.get("id")
            if not isinstance(call_id, str) or call_id in self._open_tools:
                continue
            self._open_tools[call_id] = str(block.get("name", ""))
            arguments = block.get("input")
            call: dict[str, Any] = {
                "toolCallId": call_id,
                "name": self._open_tools[call_id],
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
            if isinstance(parent, str):
                call["parentToolCallId"] = parent
            out.append(Out("tool.call", call))
        return out

    def _on_user(self, event: dict[str, Any]) -> list[Out]:
        sub_agent = event.get("parent_tool_use_id") is not None
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        out: list[Out] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in self._open_tools:
                continue
            name = self._open_tools.pop(call_id)
            output = text_of(block.get("content"))
            if block.get("is_error") is True:
                out.append(
                    self._tool_failed(call_id, name, output, cancelled=output.startswith(_INTERRUPTED_TOOL))
                )
            else:
                out.append(Out("tool.completed", {"toolCallId": call_id, "name": name, "output": output}))
                out.extend(self._tasks.result(call_id, output, event.get("tool_use_result")))
        if not sub_agent:
            out.extend(self._flush_thought())
        return out

    def _on_result(self, event: dict[str, Any]) -> list[Out]:
        subtype = str(event.get("subtype", ""))
        result = event.get("result")
        message = result if isinstance(result, str) and result else f"Claude Code ended with {subtype}"
        if event.get("is_error") is True or subtype != "success":
            status = event.get("api_error_status")
            if isinstance(status, int) and not isinstance(status, bool):
                kind, retryable = classify_result_error(status, message)
            elif subtype == "success":
                kind, retryable = classify_result_error(None, message)
            else:
                kind, retryable = classify_subtype(subtype)
            error = ErrorInfo(kind=kind, message=message, retryable=retryable)
            if subtype == "error_during_execution":
                # Also what an interrupt prints: the exit (or the cancel) decides what it was.
                self._held_failure = error
                return self._flush_thought()
            return self._stop_failed(error)
        extra: dict[str, Any] = {}
        usage = usage_of(event.get("usage"), event.get("total_cost_usd"))
        if usage is not None:
            extra["usage"] = usage
        context = self._context_usage(event.get("modelUsage"))
        if context is not None:
            extra["contextUsage"] = context
        return self._complete(_stop_reason(event.get("stop_reason")), extra)

    def _context_usage(self, model_usage: Any) -> dict[str, Any] | None:
        if not isinstance(model_usage, dict):
            return None
        windows = [
            entry["contextWindow"]
            for entry in model_usage.values()
            if isinstance(entry, dict)
            and isinstance(entry.get("contextWindow"), int)
            and entry["contextWindow"] > 0
        ]
        if not windows:
            return None
        window = max(windows)
        tokens = self._last_turn_tokens
        percent = round(100.0 * tokens / window, 2) if tokens is not None else None
        return {"tokens": tokens, "contextWindow": window, "percent": percent}

    handlers: ClassVar[dict[str, Handler]] = {
        "stream_event": _on_stream_event,
        "system": _on_system,
        "assistant": _on_assistant,
        "user": _on_user,
        "result": _on_result,
        "session": _on_bridge_session,
    }


_STOP_REASONS: Final = {
    "end_turn": "stop",
    "max_tokens": "length",
    "tool_use": "toolUse",
    "stop_sequence": "stop",
}


def _stop_reason(raw: Any) -> str:
    """The contract's stop reason (pi's words, which editors already know) for Anthropic's."""
    return _STOP_REASONS.get(raw, raw) if isinstance(raw, str) else "stop"


#: The states of an MCP server in `system/init` that are worth telling the user.
_MCP_FAILED: Final = frozenset({"failed", "needs-auth"})


def _mcp_failures(servers: object) -> list[Out]:
    """A notice for each MCP server `system/init` reports as not connected (Claude Code goes on
    without it, and says nothing else about it)."""
    if not isinstance(servers, list):
        return []
    outs: list[Out] = []
    for server in servers:
        if isinstance(server, dict) and server.get("status") in _MCP_FAILED:
            text = f"MCP server {server.get('name')}: {server.get('status')} (Claude Code goes on without it)"
            outs.append(Out("notice", {"level": "warning", "text": text}))
    return outs


_PLAN_STATUSES: Final = frozenset({"pending", "in_progress", "completed"})


def _plan_of(arguments: Any) -> list[Out]:
    """The contract's `plan` from TodoWrite's input (`todos: [{content, status, activeForm}]`)."""
    todos = arguments.get("todos") if isinstance(arguments, dict) else None
    if not isinstance(todos, list):
        return []
    entries = [
        {"content": todo["content"], "status": todo["status"]}
        for todo in todos
        if isinstance(todo, dict)
        and isinstance(todo.get("content"), str)
        and todo.get("status") in _PLAN_STATUSES
    ]
    return [Out("plan", {"entries": entries})]


class _TaskList:
    """Claude Code's task list as the contract's `plan`: from 2.1 it offers TaskCreate and
    TaskUpdate instead of TodoWrite. A task counts once its call succeeded; the list is this
    run's (a task an earlier run created is not known here)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, str]] = {}  # task id -> plan entry, in creation order
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}  # call id -> (tool, input)

    def call(self, call_id: str, name: str, arguments: Any) -> None:
        """Keep a TaskCreate or TaskUpdate call until its result."""
        if name in ("TaskCreate", "TaskUpdate") and isinstance(arguments, dict):
            self._calls[call_id] = (name, arguments)

    def result(self, call_id: str, output: str, structured: Any) -> list[Out]:
        """The whole plan after a successful task call (its `tool_use_result` names a new
        task's id; its text `Task #N created` when that is missing), else nothing."""
        called = self._calls.pop(call_id, None)
        if called is None:
            return []
        name, arguments = called
        if name == "TaskCreate":
            task = structured.get("task") if isinstance(structured, dict) else None
            task_id = task.get("id") if isinstance(task, dict) else None
            if not isinstance(task_id, str):
                found = re.search(r"#(\d+)", output)
                task_id = found.group(1) if found else None
            subject = arguments.get("subject")
            if task_id is None or not isinstance(subject, str):
                return []
            self._entries[task_id] = {"content": subject, "status": "pending"}
        else:
            if isinstance(structured, dict) and structured.get("success") is False:
                return []
            task_id = str(arguments.get("taskId"))
            entry = self._entries.get(task_id)
            if entry is None:
                return []
            status, subject = arguments.get("status"), arguments.get("subject")
            if isinstance(subject, str):
                entry["content"] = subject
            if status == "deleted":
                del self._entries[task_id]
            elif status in _PLAN_STATUSES:
                entry["status"] = status
        return [Out("plan", {"entries": [dict(entry) for entry in self._entries.values()]})]
