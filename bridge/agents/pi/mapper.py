"""Map pi's `--mode json` event lines to contract messages: pure, no I/O."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Final

import orjson

from bridge.agents.mapping import Handler, MapperCore, int_of, text_of
from bridge.agents.pi.errors import classify_exit, classify_model_error
from bridge.agents.pi.live import UI_DIALOGS
from bridge.agents.values import Out, RunOptions
from bridge.contract import MAX_TITLE, ErrorInfo

log = logging.getLogger(__name__)

# Events pi prints that carry nothing an editor needs; known, so not counted as unknown.
_IGNORED_EVENTS: Final = frozenset(
    {
        "agent_start",
        "turn_start",
        "agent_settled",
        "queue_update",
        "thinking_level_changed",
        "auto_retry_end",
        "auto_compaction_start",
        "auto_compaction_end",
    }
)


MAX_NOTICE_CHARS: Final = 2000
_COMPACTION_REASONS: Final = frozenset({"manual", "threshold", "overflow"})
_NOTICE_LEVELS: Final = frozenset({"info", "warning", "error"})

# Cheap dispatch: pi prints `{"type":"<event>",...` first; the head says what a line is.
# The bridge's plan tool (extension/todo.ts): each result's `details.todos` is the whole list.
TODO_TOOL: Final = "todo"
_TYPE_HEAD: Final = b'{"type":"'
_MAX_TYPE_BYTES: Final = 40
_IGNORED_EVENT_HEADS: Final = frozenset(kind.encode() for kind in _IGNORED_EVENTS)
_HANDLED_HEADS: Final = frozenset(
    {b"session", b"message_start", b"message_update", b"message_end", b"tool_execution_start",
     b"tool_execution_update", b"tool_execution_end", b"agent_end", b"auto_retry_start", b"turn_end"}
)  # fmt: skip
_MESSAGE_ROLE_HEAD: Final = b',"message":{"role":"'
_ASSISTANT_ROLE_HEAD: Final = b',"message":{"role":"assistant"'


# pi 0.73's message_update lines carry the whole message so far twice; parsing them costs time
# and memory quadratic in the answer's length, for data the mapper never reads. Long update lines
# are scanned for the event type and the delta string instead, which alone are JSON-decoded.
_FAST_PATH_MIN_BYTES: Final = 2048
_UPDATE_HEAD: Final = b'{"type":"message_update","assistantMessageEvent":{"type":"'
_DELTA_KEY: Final = b',"delta":"'
_KINDS_WITHOUT_TEXT: Final = frozenset(
    {b"text_start", b"text_end", b"thinking_start", b"thinking_end", b"toolcall_start", b"toolcall_delta",
     b"toolcall_end", b"start", b"done", b"error"}
)  # fmt: skip


def _scan_update(line: bytes) -> tuple[str, str | None] | None:
    """(event type, delta) of a 0.73-style message_update line, without parsing its snapshots.

    None when the line does not have the exact shape pi 0.73 prints: the caller then parses it
    in full, so an unexpected shape costs time, never correctness.
    """
    if not line.startswith(_UPDATE_HEAD):
        return None
    start = len(_UPDATE_HEAD)
    end = line.find(b'"', start, start + 32)
    if end < 0:
        return None
    kind = line[start:end]
    if kind in _KINDS_WITHOUT_TEXT:
        return kind.decode(), None
    if kind not in (b"text_delta", b"thinking_delta"):
        return None
    key = line.find(_DELTA_KEY, end, end + 64)
    if key < 0:
        return None
    opening = key + len(_DELTA_KEY) - 1
    closing = _closing_quote(line, opening)
    if closing < 0:
        return None
    try:
        delta = orjson.loads(line[opening : closing + 1])
    except orjson.JSONDecodeError:
        return None
    return kind.decode(), delta if isinstance(delta, str) else None


def _closing_quote(line: bytes, opening: int) -> int:
    """Where the JSON string opened at `opening` ends: a quote after an even run of backslashes (-1: none)."""
    closing = opening
    while True:
        closing = line.find(b'"', closing + 1)
        if closing < 0:
            return -1
        backslashes = 0
        while line[closing - 1 - backslashes] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:
            return closing


def _of_another_role(line: bytes, role_at: int) -> bool:
    """Whether a message event's message, whose role starts at `role_at`, is not the assistant's."""
    return line.startswith(_MESSAGE_ROLE_HEAD, role_at) and not line.startswith(_ASSISTANT_ROLE_HEAD, role_at)


def _plan_of_todos(details: Any) -> list[Out]:
    """The contract's `plan` from a `todo` result's details (`todos: [{id, text, done, doing}]`);
    nothing when they are not that shape (another extension's tool of the same name)."""
    todos = details.get("todos") if isinstance(details, dict) else None
    if not isinstance(todos, list):
        return []
    entries = [
        {"content": todo["text"], "status": _todo_status(todo)}
        for todo in todos
        if isinstance(todo, dict) and isinstance(todo.get("text"), str)
    ]
    return [Out("plan", {"entries": entries})]


def _todo_status(todo: dict[str, Any]) -> str:
    if todo.get("done") is True:
        return "completed"
    return "in_progress" if todo.get("doing") is True else "pending"


def _usage_of(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    cost = raw.get("cost")
    total_cost = cost.get("total") if isinstance(cost, dict) else None
    usage: dict[str, Any] = {
        "input": int_of(raw, "input"),
        "output": int_of(raw, "output"),
        "cacheRead": int_of(raw, "cacheRead"),
        "cacheWrite": int_of(raw, "cacheWrite"),
        "totalTokens": int_of(raw, "totalTokens"),
    }
    if isinstance(total_cost, (int, float)) and not isinstance(total_cost, bool):
        usage["cost"] = float(total_cost)
    return usage


def _add_usage(total: dict[str, Any] | None, more: dict[str, Any]) -> dict[str, Any]:
    if total is None:
        return dict(more)
    summed = {key: total.get(key, 0) + value for key, value in more.items() if key != "cost"}
    if "cost" in total or "cost" in more:
        summed["cost"] = float(total.get("cost", 0.0)) + float(more.get("cost", 0.0))
    return summed


class _ReplayGuard:
    """Withholds the start of a new assistant message while it repeats text already sent."""

    __slots__ = ("candidate", "matched", "withheld")

    def __init__(self, candidate: str) -> None:
        self.candidate = candidate
        self.matched = 0
        self.withheld: list[str] = []

    def push(self, delta: str) -> tuple[str, bool]:
        """Return (text to emit now, guard finished)."""
        rest = len(self.candidate) - self.matched
        if rest > 0 and len(delta) <= rest and self.candidate.startswith(delta, self.matched):
            self.matched += len(delta)
            self.withheld.append(delta)
            return "", False
        if rest == 0:
            return delta, True
        if delta.startswith(self.candidate[self.matched :]):
            return delta[rest:], True
        return "".join(self.withheld) + delta, True

    def release(self) -> str:
        """The message ended inside the guard: a full replay is dropped, a partial one is new text."""
        if self.matched == len(self.candidate):
            return ""
        return "".join(self.withheld)


class PiEventMapper(MapperCore):
    """Stateful mapper for one attempt of one pi process (see the module docstring)."""

    agent = "pi"
    clean_exit = "without finishing the run"
    ignored = _IGNORED_EVENTS

    def __init__(self, options: RunOptions) -> None:
        super().__init__(options)
        self._msg_streamed: list[str] = []
        self._guard: _ReplayGuard | None = None
        self._usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self._error_message: str | None = None

    # ------------------------------------------------------------------ EventMapper protocol

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        self.note_invalid(description)
        # agent_end repeats every message of the run, the prompt included: with a big prompt it
        # is the line over the bound. Its end-of-run meaning must survive.
        if head.startswith(b'{"type":"agent_end"') and self._last_terminal is None:
            return self._on_agent_end({})
        return []

    def _without_parsing(self, line: bytes) -> list[Out] | None:
        """Map a line without decoding it whole when the rest is never read (None: parse it).

        agent_end and turn_end repeat the run's messages (agent_end can be huge), and a tool's
        output comes again in its result message: none of it is read, so none of it is decoded.
        A long 0.73-style update is read for its delta alone.
        """
        if len(line) > _FAST_PATH_MIN_BYTES and self._last_terminal is None:
            update = _scan_update(line)
            if update is not None:
                return self._on_delta(*update)
        if not line.startswith(_TYPE_HEAD):
            return None
        end = line.find(b'"', len(_TYPE_HEAD), len(_TYPE_HEAD) + _MAX_TYPE_BYTES)
        if end < 0 or line[end + 1 : end + 2] not in (b",", b"}"):
            return None
        kind = line[len(_TYPE_HEAD) : end]
        if kind in _IGNORED_EVENT_HEADS:
            return []
        if self._last_terminal is not None:
            return [] if kind in _HANDLED_HEADS else None
        if kind == b"agent_end":
            return self._on_agent_end({})
        if kind == b"turn_end":
            return self._on_turn_end({})
        if kind in (b"message_start", b"message_end") and _of_another_role(line, end + 1):
            return []  # the user's, the system's or a tool result's message: never read
        return None

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        if self._last_terminal is not None:
            return []
        classified = classify_exit(exit_code, signal_name, stderr)
        reason = None
        if classified[0] == "session":
            # pi asks on stdin before forking a session of another project; the bridge never
            # answers pi's prompts (stdin is closed), so say what happened instead.
            tail = stderr.strip()
            reason = "pi could not resume the session: " + " ".join(tail.split())[:300]
            if "different project" in tail:
                reason += " (run it with the cwd of the session's project)"
        return self._fail_exited(exit_code, signal_name, stderr, classified, reason)

    # ------------------------------------------------------------------ event handlers

    def _on_session(self, event: dict[str, Any]) -> list[Out]:
        version = event.get("version")
        known = isinstance(version, (int, str)) and not isinstance(version, bool)
        return self._start_session(
            event.get("id"), event.get("cwd", ""), {"piVersion": version} if known else {}
        )

    def _on_message_start(self, event: dict[str, Any]) -> list[Out]:
        message = event.get("message")
        if not isinstance(message, dict) or message.get("role") != "assistant":
            return []
        self._msg_streamed = []
        sent = self.text
        self._guard = _ReplayGuard(sent) if sent else None
        return []

    def _emit_text(self, delta: str) -> list[Out]:
        if self._guard is not None:
            delta, done = self._guard.push(delta)
            if done:
                self._guard = None
        if not delta:
            return []
        self._msg_streamed.append(delta)
        self._deltas.append(delta)  # what _text_out does, inline: this is the hot path
        return [Out("assistant", {"text": delta})]

    def _on_update(self, event: dict[str, Any]) -> list[Out]:
        update = event.get("assistantMessageEvent")
        if not isinstance(update, dict):
            return self._on_snapshot_only(event)
        kind, delta = update.get("type"), update.get("delta")
        return self._on_delta(str(kind), delta if isinstance(delta, str) else None)

    def _on_delta(self, kind: str, delta: str | None) -> list[Out]:
        if kind == "text_delta":
            return self._emit_text(delta) if isinstance(delta, str) and delta else []
        if kind == "thinking_delta" and isinstance(delta, str) and delta:
            return self._thought(delta)
        return []

    def _on_snapshot_only(self, event: dict[str, Any]) -> list[Out]:
        """An update without a delta (older pi): derive the new text from the snapshot."""
        message = event.get("message")
        if not isinstance(message, dict):
            return []
        snapshot = text_of(message.get("content"))
        streamed = "".join(self._msg_streamed)
        if len(snapshot) > len(streamed) and snapshot.startswith(streamed):
            return self._emit_text(snapshot[len(streamed) :])
        return []

    def _on_message_end(self, event: dict[str, Any]) -> list[Out]:
        message = event.get("message")
        if not isinstance(message, dict) or message.get("role") != "assistant":
            return []
        out: list[Out] = []
        content = message.get("content")
        final = text_of(content)
        out.extend(self._release_withheld())
        streamed = "".join(self._msg_streamed)
        if final != streamed:
            sent_before = "".join(self._deltas[: len(self._deltas) - len(self._msg_streamed)])
            # A replayed message's final text holds the earlier text too: compare past it.
            if sent_before and final.startswith(sent_before) and not streamed.startswith(sent_before):
                final = final[len(sent_before) :]
            if len(final) > len(streamed) and final.startswith(streamed):
                out.append(self._text_out(final[len(streamed) :]))
            elif final != streamed:
                log.warning(
                    "pi's final text differs from the streamed deltas (%d vs %d chars); kept the deltas",
                    len(final),
                    len(streamed),
                )
        if not self._thoughts and not self._live_thoughts:
            self._thoughts = [text_of(content, "thinking", "thinking")]
        out.extend(self._flush_thought())
        self._msg_streamed = []
        usage = _usage_of(message.get("usage"))
        if usage is not None:
            self._usage = _add_usage(self._usage, usage)
        stop_reason = message.get("stopReason")
        if isinstance(stop_reason, str):
            self._stop_reason = stop_reason
        error_message = message.get("errorMessage")
        self._error_message = error_message if isinstance(error_message, str) else None
        return out

    def _on_tool_start(self, event: dict[str, Any]) -> list[Out]:
        return self._open_tool(
            str(event.get("toolCallId", "")), str(event.get("toolName", "")), event.get("args")
        )

    def _on_tool_update(self, event: dict[str, Any]) -> list[Out]:
        call_id = str(event.get("toolCallId", ""))
        out = [] if call_id in self._open_tools else self._on_tool_start(event)
        partial = event.get("partialResult")
        output = text_of(partial.get("content")) if isinstance(partial, dict) else ""
        out.append(Out("tool.update", {"toolCallId": call_id, "output": output}))
        return out

    def _on_tool_end(self, event: dict[str, Any]) -> list[Out]:
        call_id = str(event.get("toolCallId", ""))
        out = [] if call_id in self._open_tools else self._on_tool_start(event)
        name = self._open_tools.pop(call_id, str(event.get("toolName", "")))
        result = event.get("result")
        output = text_of(result.get("content")) if isinstance(result, dict) else ""
        if event.get("isError") is True:
            out.append(self._tool_failed(call_id, name, output))
            out.extend(self._flush_thought())
            return out
        content: dict[str, Any] = {"toolCallId": call_id, "name": name, "output": output}
        details = result.get("details") if isinstance(result, dict) else None
        if isinstance(details, dict):
            if details.get("truncation"):
                content["truncated"] = True
            path = details.get("fullOutputPath")
            if isinstance(path, str):
                content["fullOutputPath"] = path
        out.append(Out("tool.completed", content))
        if name == TODO_TOOL:
            out.extend(_plan_of_todos(details))
        out.extend(self._flush_thought())
        return out

    def _on_agent_end(self, event: dict[str, Any]) -> list[Out]:
        if self._stop_reason in ("error", "aborted"):
            message = self._error_message or f"the model request ended with stopReason {self._stop_reason}"
            kind, retryable = classify_model_error(message)
            return self._stop_failed(ErrorInfo(kind=kind, message=message, retryable=retryable))
        return self._complete(
            self._stop_reason or "stop", {} if self._usage is None else {"usage": self._usage}
        )

    def _on_auto_retry(self, event: dict[str, Any]) -> list[Out]:
        raw = event.get("errorMessage")
        return self._own_retry(": " + (raw if isinstance(raw, str) else "pi started its own retry"))

    def _on_turn_end(self, event: dict[str, Any]) -> list[Out]:
        return self._flush_thought()

    def _release_withheld(self) -> list[Out]:
        """What the replay guard withholds when the message (or the run) ends inside it."""
        if self._guard is None:
            return []
        released = self._guard.release()
        self._guard = None
        if not released:
            return []
        self._msg_streamed.append(released)
        return [self._text_out(released)]

    def _on_ui_request(self, event: dict[str, Any]) -> list[Out]:
        """An extension's `notify` is a notice; its dialog, which the rpc client has answered
        `cancelled`, is told to the user too, so a blocked tool is never a mystery."""
        method = event.get("method")
        if method == "notify":
            level = event.get("notifyType")
            text = str(event.get("message") or "")[:MAX_NOTICE_CHARS]
            return [Out("notice", {"level": level if level in _NOTICE_LEVELS else "info", "text": text})]
        if method in UI_DIALOGS:
            title = " ".join(str(event.get("title") or "").split())[:MAX_NOTICE_CHARS]
            text = f"an extension asked ({method}): {title!r}; this client cannot answer, so it was cancelled"
            return [Out("notice", {"level": "warning", "text": text})]
        return []

    def _on_compaction_start(self, event: dict[str, Any]) -> list[Out]:
        reason = event.get("reason")
        return [Out("session.compacting", {"reason": reason if reason in _COMPACTION_REASONS else "manual"})]

    def _on_compaction_end(self, event: dict[str, Any]) -> list[Out]:
        """The context's size before and after; an aborted or failed compaction says why."""
        result = event.get("result")
        content: dict[str, Any] = {}
        if isinstance(result, dict):
            for key, field in (("tokensBefore", "tokensBefore"), ("estimatedTokensAfter", "tokensAfter")):
                value = result.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    content[field] = value
        elif event.get("aborted") is True:
            content["error"] = "the compaction was aborted"
        else:
            content["error"] = str(event.get("errorMessage") or "the compaction failed")[:MAX_NOTICE_CHARS]
        return [Out("session.compacted", content)]

    def _on_session_info(self, event: dict[str, Any]) -> list[Out]:
        name = event.get("name")
        title = " ".join(name.split())[:MAX_TITLE] if isinstance(name, str) else ""
        return [Out("session.renamed", {"title": title})]

    handlers: ClassVar[dict[str, Handler]] = {
        "session": _on_session,
        "compaction_start": _on_compaction_start,
        "compaction_end": _on_compaction_end,
        "session_info_changed": _on_session_info,
        "message_update": _on_update,
        "message_start": _on_message_start,
        "message_end": _on_message_end,
        "tool_execution_start": _on_tool_start,
        "tool_execution_update": _on_tool_update,
        "tool_execution_end": _on_tool_end,
        "agent_end": _on_agent_end,
        "auto_retry_start": _on_auto_retry,
        "turn_end": _on_turn_end,
        "extension_ui_request": _on_ui_request,
    }
