"""What both agents' event mappers share: the terminal, bad lines, tool closing, thought buffering."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import orjson

from bridge.agents.values import Out, RunOptions
from bridge.contract import ErrorInfo, ErrorKind, SandboxSettings, ShutdownReceipt

log = logging.getLogger(__name__)

MAX_INVALID_SAMPLES: Final = 20
MAX_INVALID_SAMPLE_CHARS: Final = 500

#: An event handler of a mapper: the mapper, the decoded event, the messages it maps to.
Handler = Callable[[Any, dict[str, Any]], list[Out]]


def text_of(content: Any, part_type: str = "text", key: str = "text") -> str:
    """Concatenate the `key` of every part of `part_type` in a content list (pi's or Anthropic's)."""
    if isinstance(content, str):
        return content if part_type == "text" else ""
    if not isinstance(content, list):
        return ""
    return "".join(
        part[key]
        for part in content
        if isinstance(part, dict) and part.get("type") == part_type and isinstance(part.get(key), str)
    )


def json_object(line: bytes) -> dict[str, Any] | None:
    """A line decoded as a JSON object; None for anything else."""
    try:
        decoded = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def int_of(raw: dict[str, Any], key: str) -> int:
    """`raw[key]` when it is an integer (not a bool), else 0."""
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class MapperCore:
    """The state and the closing rules of one attempt's `EventMapper`; subclasses map the events."""

    #: The agent's name in the texts the bridge writes for it ("pi", "Claude Code").
    agent: ClassVar[str]
    #: How a clean exit (code 0) without the agent's own terminal is told, after "exited (code 0)".
    clean_exit: ClassVar[str]
    #: Handlers by the event's `type`.
    handlers: ClassVar[Mapping[str, Handler]]
    #: Event types that carry nothing an editor needs: known, so not counted as unknown.
    ignored: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: RunOptions) -> None:
        self._live_thoughts = options.live_thoughts
        self._resumed = options.resumed
        self._sandbox = _sandbox_info(options.sandbox)
        self._deltas: list[str] = []
        self._thoughts: list[str] = []
        self._open_tools: dict[str, str] = {}
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

    def feed(self, line: bytes) -> list[Out]:
        mapped = self._without_parsing(line)
        if mapped is not None:
            return mapped
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
        handler = self.handlers.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            return handler(self, event)
        if kind not in self.ignored:
            self._note_unknown(str(kind))
        return []

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

    # ------------------------------------------------------------------ for the subclasses

    def _without_parsing(self, line: bytes) -> list[Out] | None:
        """Map a line without decoding it whole (None: decode it); every line is decoded here."""
        return None

    def _terminal(self, out: list[Out], message: Out) -> list[Out]:
        out.append(message)
        self._last_terminal = message
        return out

    def _complete(self, stop_reason: str, extra: dict[str, Any]) -> list[Out]:
        """The agent's own end of the run: close what is open, then terminal.completed."""
        out = self._close_open(f"{self.agent} ended the run with the tool still open", cancelled=False)
        content: dict[str, Any] = {"text": self.text, "stopReason": stop_reason, **extra}
        return self._terminal(out, Out("terminal.completed", content))

    def _stop_failed(self, error: ErrorInfo) -> list[Out]:
        """The agent said the attempt failed (or is about to retry on its own): end it, stop it."""
        self._wants_stop = True
        return self.finish_failed(error)

    def _own_retry(self, detail: str) -> list[Out]:
        """The agent is about to retry by itself; one attempt must stay one attempt, so end it here."""
        message = f"{self.agent}'s own retry suppressed{detail}"
        return self._stop_failed(ErrorInfo(kind="agent_retry", message=message, retryable=True))

    def _fail_exited(
        self,
        exit_code: int | None,
        signal_name: str | None,
        stderr: str,
        classified: tuple[ErrorKind, bool],
        reason: str | None = None,
    ) -> list[Out]:
        """terminal.failed for an agent that exited without its own terminal (`reason` or the default)."""
        kind, retryable = classified
        error = ErrorInfo(
            kind=kind,
            message=reason or self._exit_reason(exit_code, signal_name, stderr),
            retryable=retryable,
            exit_code=exit_code,
            signal=signal_name,
            stderr=stderr or None,
            invalid_output_lines=self.invalid_lines or None,
        )
        return self.finish_failed(error)

    def _exit_reason(self, exit_code: int | None, signal_name: str | None, stderr: str) -> str:
        if signal_name is not None:
            reason = f"{self.agent} was killed by {signal_name} before it finished"
        elif exit_code == 0:
            reason = f"{self.agent} exited (code 0) {self.clean_exit}"
        else:
            reason = f"{self.agent} exited with code {exit_code} before it finished"
        tail = stderr.strip()
        if tail:
            reason = f"{reason}: {tail.splitlines()[-1][:300]}"
        return reason

    def _note_unknown(self, kind: str) -> None:
        self.unknown_events[kind] += 1
        if self.unknown_events[kind] == 1:
            log.info("%s event of unknown type %r ignored", self.agent, kind)

    def _start_session(self, session_id: Any, cwd: Any, extra: dict[str, Any]) -> list[Out]:
        """session.started (or .resumed) once, for the first session id the agent names."""
        if not isinstance(session_id, str) or self._session_id is not None:
            return []
        self._session_id = session_id
        content: dict[str, Any] = {"sessionId": session_id, "cwd": str(cwd), **extra}
        content["sandbox"] = self._sandbox
        return [Out("session.resumed" if self._resumed else "session.started", content)]

    def _text_out(self, delta: str) -> Out:
        """An assistant delta, counted into `text`: the caller sends each piece of text once."""
        self._deltas.append(delta)
        return Out("assistant", {"text": delta})

    def _thought(self, text: str) -> list[Out]:
        """Thought text: sent at once when thoughts are live, else buffered for `_flush_thought`."""
        if self._live_thoughts:
            return [Out("assistant.thought", {"text": text, "live": True})]
        self._thoughts.append(text)
        return []

    def _flush_thought(self) -> list[Out]:
        """The buffered thought, whole, unless a tool call is open (it waits for the close)."""
        if self._open_tools or self._live_thoughts or not self._thoughts:
            return []
        thought = "".join(self._thoughts)
        self._thoughts = []
        return [Out("assistant.thought", {"text": thought})] if thought else []

    def _open_tool(self, call_id: str, name: str, arguments: Any) -> list[Out]:
        """tool.call, after the thought of the message that asked for it; nothing if already open."""
        if call_id in self._open_tools:
            return []
        before = self._flush_thought()
        self._open_tools[call_id] = name
        content = {
            "toolCallId": call_id,
            "name": name,
            "arguments": arguments if isinstance(arguments, dict) else {},
        }
        return [*before, Out("tool.call", content)]

    @staticmethod
    def _tool_failed(call_id: str, name: str, error: str, *, cancelled: bool = False) -> Out:
        content: dict[str, Any] = {"toolCallId": call_id, "name": name, "error": error}
        if cancelled:
            content["cancelled"] = True
        return Out("tool.failed", content)

    def _release_withheld(self) -> list[Out]:
        """Text the agent's mapper holds back at the end (none here; pi's replay guard holds some)."""
        return []

    def _close_open(self, reason: str, *, cancelled: bool) -> list[Out]:
        out = self._release_withheld()
        for call_id, name in self._open_tools.items():
            out.append(self._tool_failed(call_id, name, reason, cancelled=cancelled))
        self._open_tools.clear()
        out.extend(self._flush_thought())  # after the closes: never between a call and its close
        return out


def _sandbox_info(sandbox: SandboxSettings | None) -> dict[str, Any]:
    """session.started's `sandbox`: bwrap confines the session's commands, or nothing does."""
    if sandbox is None or sandbox.mode == "off":
        return {"kind": "none", "mode": "off", "network": True}
    return {"kind": "bwrap", "mode": sandbox.mode, "network": sandbox.network}
