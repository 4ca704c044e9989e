"""How an attempt ends, for both engines: its outcome, the first reason to stop, the watch of
its bounds, and the errors of the endings they share (in the agent's own name)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import anyio

from bridge.agents.seam import EventMapper
from bridge.contract import ErrorInfo, ShutdownReceipt
from bridge.process.framing import MAX_LINE_BYTES

R = TypeVar("R", bound=str)


class FirstStop(Generic[R]):
    """First reason to stop wins; the attempt's main body waits on it."""

    def __init__(self) -> None:
        self.reason: R | None = None
        self.event = anyio.Event()

    def set(self, reason: R) -> None:
        """Stop for `reason`, unless a reason came first."""
        if self.reason is None:
            self.reason = reason
            self.event.set()

    def reset(self) -> None:
        """No reason yet: the attempt starts over on another agent."""
        self.reason = None
        self.event = anyio.Event()


@dataclass(frozen=True, slots=True)
class AttemptLimits:
    """Bounds of one attempt: absolute deadline (monotonic), silence limit, line bound."""

    deadline: float | None = None
    deadline_ms: int | None = None
    silence_seconds: float | None = None
    max_line_bytes: int = MAX_LINE_BYTES


@dataclass(slots=True)
class AttemptOutcome:
    """How an attempt ended, read off its terminal message."""

    status: Literal["completed", "failed", "cancelled"]
    text: str
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    shutdown: ShutdownReceipt | None = None
    session_id: str | None = None
    pid: int | None = None
    # The attempt's agent lives on for the conversation (a live agent): it is no process of the run.
    agent_kept: bool = False
    # A cancelled run's messages the agent had queued and not taken in (the cancel's `unsent`).
    unsent: tuple[str, ...] = ()


async def overrun(
    limits: AttemptLimits, holding_back: Callable[[], bool], quiet_since: Callable[[], float]
) -> Literal["deadline", "silence"] | None:
    """Wait until the attempt passes its deadline, or the agent stays silent too long (None at
    once: it has neither bound). While the bridge holds its reading back, the quiet is not the
    agent's silence."""
    deadline = limits.deadline
    silence = limits.silence_seconds
    if deadline is None and silence is None:
        return None
    while True:
        now = time.monotonic()
        waits: list[float] = []
        if deadline is not None:
            if now >= deadline:
                return "deadline"
            waits.append(deadline - now)
        if silence is not None and holding_back():
            waits.append(silence)
        elif silence is not None:
            quiet_until = quiet_since() + silence
            if now >= quiet_until:
                return "silence"
            waits.append(quiet_until - now)
        await anyio.sleep(min(waits))


def deadline_error(limits: AttemptLimits) -> ErrorInfo:
    """The run outlived its deadline and was stopped."""
    message = f"the run exceeded its deadline of {limits.deadline_ms} ms; stopped"
    return ErrorInfo(kind="timeout", message=message, retryable=False)


def silence_error(agent: str, limits: AttemptLimits, stderr: str) -> ErrorInfo:
    """The agent printed nothing for the silence limit and was stopped."""
    silence = limits.silence_seconds or 0
    return _stalled(f"{agent} printed nothing for {silence:g} s and was stopped", stderr)


def kept_running_error(agent: str, stderr: str) -> ErrorInfo:
    """The agent closed its output but did not exit, and was stopped."""
    return _stalled(f"{agent} closed its output but kept running; it was stopped", stderr)


def _stalled(message: str, stderr: str) -> ErrorInfo:
    return ErrorInfo(kind="stalled", message=message, retryable=True, stderr=stderr or None)


def internal_error(agent: str, exc: Exception) -> ErrorInfo:
    """A bug in the bridge's handling of the agent's output."""
    return ErrorInfo(
        kind="internal",
        message=f"the bridge failed on {agent}'s output: {type(exc).__name__}: {str(exc)[:200]}",
        retryable=False,
    )


def unexpected_end() -> ErrorInfo:
    """The attempt ended without any ending of its own (the last resort of both engines)."""
    return ErrorInfo(kind="internal", message="the attempt ended unexpectedly", retryable=True)


def not_started() -> ShutdownReceipt:
    """The receipt of an attempt cancelled before its agent started: nothing to stop."""
    return ShutdownReceipt(stage="exited", elapsed_ms=0.0, pids=[], survivors=[])


def exit_status(returncode: int | None) -> tuple[int | None, str | None]:
    """(exit code, signal name) of an exited agent: a negative return code is a signal."""
    if returncode is None or returncode >= 0:
        return returncode, None
    try:
        return None, signal.Signals(-returncode).name
    except ValueError:
        return None, f"signal {-returncode}"


def outcome_of(
    mapper: EventMapper, shutdown: ShutdownReceipt | None, pid: int | None, *, agent_kept: bool = False
) -> AttemptOutcome:
    """Read an attempt's outcome off the terminal message its mapper produced."""
    terminal = mapper.last_terminal
    assert terminal is not None, "every attempt ends with a terminal message"
    content = terminal.content
    if terminal.type == "terminal.completed":
        return AttemptOutcome(
            "completed",
            content["text"],
            stop_reason=content.get("stopReason"),
            usage=content.get("usage"),
            session_id=mapper.session_id,
            pid=pid,
            agent_kept=agent_kept,
        )
    if terminal.type == "terminal.cancelled":
        return AttemptOutcome(
            "cancelled",
            content["text"],
            shutdown=shutdown,
            session_id=mapper.session_id,
            pid=pid,
            agent_kept=agent_kept,
        )
    return AttemptOutcome(
        "failed",
        content["text"],
        error=ErrorInfo.model_validate(content["error"]),
        shutdown=shutdown,
        session_id=mapper.session_id,
        pid=pid,
        agent_kept=agent_kept,
    )
