"""Map pi's `--mode json` event lines to contract messages: pure, no I/O.

Handles both stream formats pi has shipped:
- pi >= 0.84 (e.g. 1.6.0): `message_update` carries only the delta.
- pi 0.73: every `message_update` also carries the whole message so far, twice. Those snapshots
  are never read on the delta path (they can even run ahead of the deltas); the final text of a
  message is reconciled with what was streamed by prefix comparison at `message_end`.
- Older pi (the HagiCode article): after a tool turn the next assistant message may replay the
  text already sent before continuing; the replayed prefix is withheld and dropped.

Thoughts are buffered per assistant message and emitted whole when it ends, i.e. before any
tool call it makes, so a thought never lands between a tool.call and its close.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Final

import orjson

from bridge.agents.pi.errors import classify_exit, classify_model_error
from bridge.agents.seam import Out, RunOptions
from bridge.contract import ErrorInfo, ShutdownReceipt

log = logging.getLogger(__name__)

MAX_INVALID_SAMPLES: Final = 20
MAX_INVALID_SAMPLE_CHARS: Final = 500

# Events pi prints that carry nothing an editor needs; known, so not counted as unknown.
_IGNORED_EVENTS: Final = frozenset(
    {
        "agent_start",
        "turn_start",
        "agent_settled",
        "queue_update",
        "session_info_changed",
        "thinking_level_changed",
        "compaction_start",
        "compaction_end",
        "auto_retry_end",
        "auto_compaction_start",
        "auto_compaction_end",
    }
)


# Cheap dispatch: pi prints `{"type":"<event>",...` first; the head says what a line is.
_TYPE_HEAD: Final = b'{"type":"'
_MAX_TYPE_BYTES: Final = 40
_IGNORED_EVENT_HEADS: Final = frozenset(kind.encode() for kind in _IGNORED_EVENTS)
_HANDLED_HEADS: Final = frozenset(
    {b"session", b"message_start", b"message_update", b"message_end", b"tool_execution_start",
     b"tool_execution_update", b"tool_execution_end", b"agent_end", b"auto_retry_start", b"turn_end"}
)  # fmt: skip
_MESSAGE_ROLE_HEAD: Final = b',"message":{"role":"'
_ASSISTANT_ROLE_HEAD: Final = b',"message":{"role":"assistant"'


def _text_of(content: Any, part_type: str = "text", key: str = "text") -> str:
    """Concatenate the `key` of every part of `part_type` in a pi content list."""
    if isinstance(content, str):
        return content if part_type == "text" else ""
    if not isinstance(content, list):
        return ""
    return "".join(
        part[key]
        for part in content
        if isinstance(part, dict) and part.get("type") == part_type and isinstance(part.get(key), str)
    )


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
    closing = opening
    while True:
        closing = line.find(b'"', closing + 1)
        if closing < 0:
            return None
        backslashes = 0
        while line[closing - 1 - backslashes] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:
            break
    try:
        delta = orjson.loads(line[opening : closing + 1])
    except orjson.JSONDecodeError:
        return None
    return kind.decode(), delta if isinstance(delta, str) else None


def _usage_of(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    cost = raw.get("cost")
    total_cost = cost.get("total") if isinstance(cost, dict) else None

    def num(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    usage: dict[str, Any] = {
        "input": num("input"),
        "output": num("output"),
        "cacheRead": num("cacheRead"),
        "cacheWrite": num("cacheWrite"),
        "totalTokens": num("totalTokens"),
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


class PiEventMapper:
    """Stateful mapper for one attempt of one pi process (see the module docstring)."""

    def __init__(self, options: RunOptions) -> None:
        self._live_thoughts = options.live_thoughts
        self._resumed = options.resumed
        self._deltas: list[str] = []
        self._msg_streamed: list[str] = []
        self._msg_thoughts: list[str] = []
        self._guard: _ReplayGuard | None = None
        self._open_tools: dict[str, str] = {}
        self._usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self._error_message: str | None = None
        self._last_terminal: Out | None = None
        self._wants_stop = False
        self._session_id: str | None = None
        self._invalid: list[str] = []
        self.invalid_count = 0
        self.unknown_events: Counter[str] = Counter()

    # ------------------------------------------------------------------ EventMapper protocol

    @property
    def last_terminal(self) -> Out | None:
        return self._last_terminal

    def _terminal(self, out: list[Out], message: Out) -> list[Out]:
        out.append(message)
        self._last_terminal = message
        return out

    @property
    def wants_stop(self) -> bool:
        return self._wants_stop

    @property
    def text(self) -> str:
        return "".join(self._deltas)

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def invalid_lines(self) -> list[str]:
        return list(self._invalid)

    def note_invalid(self, description: str) -> None:
        self.invalid_count += 1
        if len(self._invalid) < MAX_INVALID_SAMPLES:
            self._invalid.append(description[:MAX_INVALID_SAMPLE_CHARS])

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        self.note_invalid(description)
        # agent_end repeats every message of the run, the prompt included: with a big prompt it
        # is the line over the bound. Its end-of-run meaning must survive.
        if head.startswith(b'{"type":"agent_end"') and self._last_terminal is None:
            return self._on_agent_end({})
        return []

    def feed(self, line: bytes) -> list[Out]:
        skipped = self._without_parsing(line)
        if skipped is not None:
            return skipped
        if len(line) > _FAST_PATH_MIN_BYTES and self._last_terminal is None:
            update = _scan_update(line)
            if update is not None:
                return self._on_delta(*update)
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.strip():
                self.note_invalid(line[:MAX_INVALID_SAMPLE_CHARS].decode("utf-8", "replace"))
            return []
        if not isinstance(event, dict):
            self.note_invalid(line[:MAX_INVALID_SAMPLE_CHARS].decode("utf-8", "replace"))
            return []
        if self._last_terminal is not None:
            return []
        kind = event.get("type")
        if kind == "message_update":
            return self._on_update(event)
        handler = self._HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            return handler(self, event)
        if kind not in _IGNORED_EVENTS:
            self.unknown_events[str(kind)] += 1
            if self.unknown_events[str(kind)] == 1:
                log.info("pi event of unknown type %r ignored", kind)
        return []

    def _without_parsing(self, line: bytes) -> list[Out] | None:
        """Map a line from its head alone when the rest is never read (None: parse it).

        agent_end and turn_end repeat the run's messages (agent_end can be 64 MB), and a tool's
        output comes again in its result message: none of it is read, so none of it is decoded.
        """
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
        if kind in (b"message_start", b"message_end"):
            role_at = end + 1
            if line.startswith(_MESSAGE_ROLE_HEAD, role_at) and not line.startswith(
                _ASSISTANT_ROLE_HEAD, role_at
            ):
                return []  # the user's, the system's or a tool result's message: never read
        return None

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        if self._last_terminal is not None:
            return []
        if signal_name is not None:
            reason = f"pi was killed by {signal_name} before it finished"
        elif exit_code == 0:
            reason = "pi exited (code 0) without finishing the run"
        else:
            reason = f"pi exited with code {exit_code} before it finished"
        tail = stderr.strip()
        if tail:
            reason = f"{reason}: {tail.splitlines()[-1][:300]}"
        kind, retryable = classify_exit(exit_code, signal_name, stderr)
        if kind == "session":
            # pi asks on stdin before forking a session of another project; the bridge never
            # answers pi's prompts (stdin is closed), so say what happened instead.
            reason = "pi could not resume the session: " + " ".join(tail.split())[:300]
            if "different project" in tail:
                reason += " (run it with the cwd of the session's project)"
        error = ErrorInfo(
            kind=kind,
            message=reason,
            retryable=retryable,
            exit_code=exit_code,
            signal=signal_name,
            stderr=stderr or None,
            invalid_output_lines=self.invalid_lines or None,
        )
        return self.finish_failed(error)

    def finish_failed(self, error: ErrorInfo) -> list[Out]:
        if self._last_terminal is not None:
            return []
        out = self._close_open(f"the run failed: {error.message}", cancelled=False)
        if error.invalid_output_lines is None and self._invalid:
            error = error.model_copy(update={"invalid_output_lines": self.invalid_lines})
        error_json = error.model_dump(mode="json", by_alias=True, exclude_none=True)
        return self._terminal(out, Out("terminal.failed", {"error": error_json, "text": self.text}))

    def finish_cancelled(self, receipt: ShutdownReceipt) -> list[Out]:
        if self._last_terminal is not None:
            return []
        out = self._close_open("cancelled", cancelled=True)
        shutdown = receipt.model_dump(mode="json", by_alias=True)
        return self._terminal(out, Out("terminal.cancelled", {"text": self.text, "shutdown": shutdown}))

    # ------------------------------------------------------------------ event handlers

    def _on_session(self, event: dict[str, Any]) -> list[Out]:
        session_id = event.get("id")
        if not isinstance(session_id, str) or self._session_id is not None:
            return []
        self._session_id = session_id
        content: dict[str, Any] = {"sessionId": session_id, "cwd": str(event.get("cwd", ""))}
        version = event.get("version")
        if isinstance(version, (int, str)) and not isinstance(version, bool):
            content["piVersion"] = version
        return [Out("session.resumed" if self._resumed else "session.started", content)]

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
        self._deltas.append(delta)
        self._msg_streamed.append(delta)
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
        if kind == "thinking_delta":
            if not isinstance(delta, str) or not delta:
                return []
            if self._live_thoughts:
                return [Out("assistant.thought", {"text": delta, "live": True})]
            self._msg_thoughts.append(delta)
            return []
        return []

    def _on_snapshot_only(self, event: dict[str, Any]) -> list[Out]:
        """An update without a delta (older pi): derive the new text from the snapshot."""
        message = event.get("message")
        if not isinstance(message, dict):
            return []
        snapshot = _text_of(message.get("content"))
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
        final = _text_of(content)
        if self._guard is not None:
            released = self._guard.release()
            self._guard = None
            if released:
                self._deltas.append(released)
                self._msg_streamed.append(released)
                out.append(Out("assistant", {"text": released}))
        streamed = "".join(self._msg_streamed)
        if final != streamed:
            sent_before = "".join(self._deltas[: len(self._deltas) - len(self._msg_streamed)])
            # A replayed message's final text holds the earlier text too: compare past it.
            if sent_before and final.startswith(sent_before) and not streamed.startswith(sent_before):
                final = final[len(sent_before) :]
            if len(final) > len(streamed) and final.startswith(streamed):
                tail = final[len(streamed) :]
                self._deltas.append(tail)
                out.append(Out("assistant", {"text": tail}))
            elif final != streamed:
                log.warning(
                    "pi's final text differs from the streamed deltas (%d vs %d chars); kept the deltas",
                    len(final),
                    len(streamed),
                )
        if not self._msg_thoughts and not self._live_thoughts:
            self._msg_thoughts = [_text_of(content, "thinking", "thinking")]
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
        call_id = str(event.get("toolCallId", ""))
        name = str(event.get("toolName", ""))
        if call_id in self._open_tools:
            return []
        args = event.get("args")
        before = self._flush_thought()  # a thought of the message that asked for this tool
        self._open_tools[call_id] = name
        return [
            *before,
            Out(
                "tool.call",
                {"toolCallId": call_id, "name": name, "arguments": args if isinstance(args, dict) else {}},
            ),
        ]

    def _on_tool_update(self, event: dict[str, Any]) -> list[Out]:
        call_id = str(event.get("toolCallId", ""))
        out = [] if call_id in self._open_tools else self._on_tool_start(event)
        partial = event.get("partialResult")
        output = _text_of(partial.get("content")) if isinstance(partial, dict) else ""
        out.append(Out("tool.update", {"toolCallId": call_id, "output": output}))
        return out

    def _on_tool_end(self, event: dict[str, Any]) -> list[Out]:
        call_id = str(event.get("toolCallId", ""))
        out = [] if call_id in self._open_tools else self._on_tool_start(event)
        name = self._open_tools.pop(call_id, str(event.get("toolName", "")))
        result = event.get("result")
        output = _text_of(result.get("content")) if isinstance(result, dict) else ""
        if event.get("isError") is True:
            out.append(Out("tool.failed", {"toolCallId": call_id, "name": name, "error": output}))
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
        out.extend(self._flush_thought())
        return out

    def _on_agent_end(self, event: dict[str, Any]) -> list[Out]:
        if self._stop_reason in ("error", "aborted"):
            message = self._error_message or f"the model request ended with stopReason {self._stop_reason}"
            kind, retryable = classify_model_error(message)
            self._wants_stop = True
            return self.finish_failed(ErrorInfo(kind=kind, message=message, retryable=retryable))
        out = self._close_open("pi ended the run with the tool still open", cancelled=False)
        content: dict[str, Any] = {"text": self.text, "stopReason": self._stop_reason or "stop"}
        if self._usage is not None:
            content["usage"] = self._usage
        return self._terminal(out, Out("terminal.completed", content))

    def _on_auto_retry(self, event: dict[str, Any]) -> list[Out]:
        # pi is about to retry by itself; one attempt must stay one attempt, so end it here.
        raw = event.get("errorMessage")
        message = raw if isinstance(raw, str) else "pi started its own retry"
        self._wants_stop = True
        return self.finish_failed(
            ErrorInfo(kind="agent_retry", message=f"pi's own retry suppressed: {message}", retryable=True)
        )

    def _on_turn_end(self, event: dict[str, Any]) -> list[Out]:
        return self._flush_thought()

    def _flush_thought(self) -> list[Out]:
        """The buffered thought, whole, unless a tool call is open (it waits for the close)."""
        if self._open_tools or self._live_thoughts:
            return []
        thought = "".join(self._msg_thoughts)
        self._msg_thoughts = []
        return [Out("assistant.thought", {"text": thought})] if thought else []

    def _close_open(self, reason: str, *, cancelled: bool) -> list[Out]:
        out: list[Out] = []
        if self._guard is not None:
            released = self._guard.release()
            self._guard = None
            if released:
                self._deltas.append(released)
                out.append(Out("assistant", {"text": released}))
        for call_id, name in self._open_tools.items():
            content: dict[str, Any] = {"toolCallId": call_id, "name": name, "error": reason}
            if cancelled:
                content["cancelled"] = True
            out.append(Out("tool.failed", content))
        self._open_tools.clear()
        out.extend(self._flush_thought())  # after the closes: never between a call and its close
        return out

    _HANDLERS: Final = {
        "session": _on_session,
        "message_start": _on_message_start,
        "message_end": _on_message_end,
        "tool_execution_start": _on_tool_start,
        "tool_execution_update": _on_tool_update,
        "tool_execution_end": _on_tool_end,
        "agent_end": _on_agent_end,
        "auto_retry_start": _on_auto_retry,
        "turn_end": _on_turn_end,
    }
