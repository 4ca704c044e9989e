"""Map ``codex exec --json`` lines to contract messages: pure, no I/O."""

from __future__ import annotations

from typing import Any, ClassVar, Final

from bridge.agents.mapping import Handler, MapperCore, int_of
from bridge.agents.values import Out, RunOptions
from bridge.contract import ErrorInfo, ErrorKind

#: Item types that are tool calls, and the tool name each gets on the wire.
_TOOL_ITEMS: Final = {
    "command_execution": "exec_command",
    "file_change": "apply_patch",
    "mcp_tool_call": "mcp",
    "web_search": "web_search",
}


def classify_exit(exit_code: int | None, stderr: str) -> tuple[ErrorKind, bool]:
    """(kind, retryable) of a Codex that ended without ``turn.completed``."""
    lowered = stderr.lower()
    if "401" in lowered or "unauthorized" in lowered or "api key" in lowered:
        return "auth", False
    if "429" in lowered or "rate limit" in lowered:
        return "rate_limit", True
    return "process", True


def _error_kind(message: str) -> tuple[ErrorKind, bool]:
    """(kind, retryable) of a failed turn, from Codex's message."""
    lowered = message.lower()
    if "401" in lowered or "unauthorized" in lowered:
        return "auth", False
    if "429" in lowered or "rate limit" in lowered:
        return "rate_limit", True
    return "model", True


class CodexEventMapper(MapperCore):
    """The `EventMapper` of one ``codex exec --json`` attempt."""

    agent = "Codex"
    clean_exit = "without turn.completed"
    handlers: ClassVar[dict[str, Handler]]

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._cwd = options.cwd

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        self.note_invalid(description)
        return []

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        if self._last_terminal is not None:
            return []
        return self._fail_exited(exit_code, signal_name, stderr, classify_exit(exit_code, stderr))

    def _on_thread_started(self, event: dict[str, Any]) -> list[Out]:
        return self._start_session(event.get("thread_id"), self._cwd, {})

    def _on_bridge_session(self, event: dict[str, Any]) -> list[Out]:
        """The live engine's own line naming the conversation."""
        return self._start_session(event.get("id"), event.get("cwd", self._cwd), {})

    def _on_delta(self, event: dict[str, Any]) -> list[Out]:
        """Streamed text of the live mode."""
        delta = event.get("delta")
        return [self._text_out(delta)] if isinstance(delta, str) and delta else []

    def _on_item(self, event: dict[str, Any]) -> list[Out]:
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        kind, item_id = item.get("type"), str(item.get("id", ""))
        done = event.get("type") == "item.completed"
        if kind == "agent_message":
            text = item.get("text")
            if not done or not isinstance(text, str) or not text:
                return []
            # One message after another: they read as paragraphs, as Codex shows them.
            return [self._text_out(("\n\n" if self._deltas else "") + text)]
        if kind == "reasoning":
            text = item.get("text")
            return self._thought(text) + self._flush_thought() if done and isinstance(text, str) else []
        if kind == "mcp_tool_call" and item.get("server") and item.get("tool"):
            # named as pi and Claude Code name an MCP tool
            return self._on_tool_item(item_id, f"mcp__{item['server']}__{item['tool']}", item, done)
        if kind in _TOOL_ITEMS:
            return self._on_tool_item(item_id, _TOOL_ITEMS[kind], item, done)
        if kind == "error":
            message = item.get("message")
            return [Out("notice", {"level": "warning", "text": str(message)})] if done and message else []
        if kind is not None and kind != "todo_list":
            self._note_unknown(f"item/{kind}")
        return []

    def _on_tool_item(self, item_id: str, name: str, item: dict[str, Any], done: bool) -> list[Out]:
        arguments = {
            k: v
            for k, v in item.items()
            if k in ("command", "changes", "query", "server", "tool", "arguments")
        }
        out = self._open_tool(item_id, name, arguments)
        if not done:
            return out
        self._open_tools.pop(item_id, None)
        output = item.get("aggregated_output")
        output = output if isinstance(output, str) else ""
        if item.get("status") == "completed" and item.get("exit_code") in (0, None):
            out.append(Out("tool.completed", {"toolCallId": item_id, "name": name, "output": output}))
        else:
            error = output or f"exit code {item.get('exit_code')}"
            out.append(self._tool_failed(item_id, name, error))
        return out + self._flush_thought()

    def _on_turn_completed(self, event: dict[str, Any]) -> list[Out]:
        raw = event.get("usage")
        extra: dict[str, Any] = {}
        if isinstance(raw, dict):
            usage = {
                "input": int_of(raw, "input_tokens"),
                "output": int_of(raw, "output_tokens"),
                "cacheRead": int_of(raw, "cached_input_tokens"),
                "cacheWrite": int_of(raw, "cache_write_input_tokens"),
            }
            usage["totalTokens"] = usage["input"] + usage["output"]
            extra["usage"] = usage
        return self._complete("stop", extra)

    def _on_failure(self, event: dict[str, Any]) -> list[Out]:
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else event.get("message")
        text = str(message or "Codex's turn failed")
        kind, retryable = _error_kind(text)
        return self._stop_failed(ErrorInfo(kind=kind, message=text, retryable=retryable))


CodexEventMapper.handlers = {
    "thread.started": CodexEventMapper._on_thread_started,
    "session": CodexEventMapper._on_bridge_session,
    "message.delta": CodexEventMapper._on_delta,
    "turn.started": lambda mapper, event: [],
    "item.started": CodexEventMapper._on_item,
    "item.updated": CodexEventMapper._on_item,
    "item.completed": CodexEventMapper._on_item,
    "turn.completed": CodexEventMapper._on_turn_completed,
    "turn.failed": CodexEventMapper._on_failure,
    "error": CodexEventMapper._on_failure,
}
