"""One run: its state, its gap-free `seq` stamping, and at the end its answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio

from bridge.agents.seam import AgentAdapter
from bridge.agents.values import Out, RunOptions
from bridge.contract import (
    CancelledRunData,
    ErrorInfo,
    RunInfo,
    RunResult,
    RunState,
    ShutdownReceipt,
    Usage,
)
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptOutcome
from bridge.policy.file_access import FileAccess
from bridge.policy.redact import Redactor, StreamGuard
from bridge.runs.request import RunRequest

log = logging.getLogger(__name__)
#: What the agent streams of its own: the first of it starts the checkpoint (take_checkpoint).
_AGENT_OUTPUT: Final = frozenset({"assistant", "assistant.thought", "tool.call"})

Sink = Callable[[list[dict[str, Any]]], None]


class DuplicateRunError(ValueError):
    """A run with this id is live already."""


@dataclass(eq=False)
class Run:
    """One pi/run request: its state, message counter, cancel token and, at the end, its answer."""

    run_id: str
    params: RunRequest
    options: RunOptions
    sink: Sink
    cancel: CancelToken = field(default_factory=CancelToken)
    state: RunState = "queued"
    attempt: int = 1
    seq: int = 0
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    pid: int | None = None
    session_id: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: RunResult | CancelledRunData | None = None
    cancel_receipt: ShutdownReceipt | None = None
    redactor: Redactor = field(default_factory=Redactor)
    # Set while a live-engine attempt streams: hands pi a steering message (None = taken).
    steerer: Callable[[str], Awaitable[str | None]] | None = None
    # The agent CLI that runs this run, and how it is started.
    adapter: AgentAdapter | None = None
    command: tuple[str, ...] = ()
    # Called once the run has its answer, before `done` is set (the request's answer goes out).
    on_done: Callable[[Run], None] | None = None
    # The run's own bookkeeping, done right after `on_done` in the same step of the loop: off the
    # answer's path, and still ahead of any frame the client sends once it has the answer.
    after_answer: list[Callable[[], None]] = field(default_factory=list)
    # The tool calls the bridge refused (permissions): their tool.failed says `reason: "denied"`.
    denied: set[str] = field(default_factory=set)
    # The resolved path the permission gate judged for a tool call: its file operations stay on it.
    judged_paths: dict[str, str] = field(default_factory=dict)
    # The run's file access policy (policy/file_ops.py), built with its first use.
    file_access: FileAccess | None = None
    # Holds back an `assistant` delta's tail that could begin a secret (redact.StreamGuard).
    guard: StreamGuard = field(default_factory=StreamGuard)
    # Set once the workspace's checkpoint before this prompt is taken: its tools wait for it.
    before_tools: anyio.Event | None = None
    # Starts that checkpoint (None: started, or there is none).
    checkpoint_start: Callable[[], None] | None = None
    # Why the run has no checkpoint (git failed, the workspace is too large).
    checkpoint_note: str | None = None
    # The conversation whose run this one waits for (run.queued, reason "session"), while it waits.
    waits_for: str | None = None
    # The prompts of the runs a cancel of this one took along (see RunRegistry._stop_runs_behind).
    unsent_behind: list[str] = field(default_factory=list)

    def keep_books(self) -> None:
        """The bookkeeping queued for after the answer, once; then it lets go of the run (each
        piece holds it)."""
        pieces, self.after_answer = self.after_answer, []
        for piece in pieces:
            try:
                piece()
            except Exception:
                log.exception("run %s: its bookkeeping after the answer failed", self.run_id)

    @property
    def tools_held(self) -> bool:
        """Whether the run's tools must wait for its checkpoint still."""
        return self.before_tools is not None and not self.before_tools.is_set()

    @property
    def sandboxed(self) -> bool:
        """Whether the run's tool commands are to be confined."""
        return self.options.sandbox is not None and self.options.sandbox.mode != "off"

    @property
    def agent(self) -> AgentAdapter:
        """The run's agent (chosen when the run started)."""
        assert self.adapter is not None, "start() chose the run's agent"
        return self.adapter

    def set_steerer(self, steerer: Callable[[str], Awaitable[str | None]] | None) -> None:
        """The attempt streaming now can (or no longer can) take steering messages."""
        self.steerer = steerer

    def set_state(self, state: RunState) -> None:
        """Move to a new lifecycle state, logged old -> new."""
        if state != self.state:
            log.info("run %s: %s -> %s", self.run_id, self.state, state)
            self.state = state

    def emit(self, outs: list[Out]) -> None:
        """Stamp messages with runId, attempt and the next seq; hand them to the sink in one batch."""
        batch: list[dict[str, Any]] = []
        for out in self._guarded(outs):
            content = out.content
            if out.type in _CARRY_ERRORS:
                content = _redacted(self.redactor, out.type, content)
            if out.type == "tool.failed" and content.get("toolCallId") in self.denied:
                content = {**content, "reason": "denied"}
            self.seq += 1
            batch.append(
                {
                    "runId": self.run_id,
                    "attempt": self.attempt,
                    "seq": self.seq,
                    "type": out.type,
                    "content": content,
                }
            )
        if batch:
            self.sink(batch)
            if self.checkpoint_start is not None and any(out.type in _AGENT_OUTPUT for out in outs):
                self.take_checkpoint()

    def _guarded(self, outs: list[Out]) -> list[Out]:
        """The messages with each `assistant` delta masked, a tail that could begin a secret held
        back until the next delta, and sent before any other message (so the concatenation of
        the deltas stays the whole text, masked, and a secret cut in two is still masked)."""
        if self.guard.idle:
            return outs
        guarded: list[Out] = []
        for out in outs:
            if out.type == "assistant":
                delta = str(out.content.get("text", ""))
                text = self.guard.feed(delta)
                if text:
                    guarded.append(out if text == delta else Out("assistant", {**out.content, "text": text}))
                continue
            held = self.guard.flush()
            if held:
                guarded.append(Out("assistant", {"text": held}))
            guarded.append(out)
        return guarded

    def take_checkpoint(self) -> None:
        """Start the snapshot before this prompt now, if it has not started: once the agent's
        first output is out (it then competes with no first delta), or when a tool waits for it."""
        start, self.checkpoint_start = self.checkpoint_start, None
        if start is not None:
            start()

    def note_session(self, session_id: str) -> None:
        """The run's conversation is known (a new one's id included): pi/closeSession finds it."""
        self.session_id = session_id

    def note_pid(self, pid: int) -> None:
        """The attempt's agent process is up (pi/runs shows its pid while the run is live)."""
        self.pid = pid

    def info(self) -> RunInfo:
        """This run as listed by pi/runs."""
        return RunInfo(
            run_id=self.run_id,
            state=self.state,
            attempt=self.attempt,
            started_at=self.started_at,
            session_id=self.session_id,
            pid=self.pid,
        )

    def fail(self, error: ErrorInfo) -> None:
        """End the run before any attempt: the terminal failure message, then the answer."""
        self.emit(self.agent.new_mapper(self.options).finish_failed(error))
        self.answer = RunResult(run_id=self.run_id, status="failed", text="", attempts=1, error=error)

    def answer_of(self, outcome: AttemptOutcome) -> RunResult | CancelledRunData:
        """The run's answer from its last attempt's outcome (error text masked)."""
        if outcome.status == "cancelled":
            return CancelledRunData(
                run_id=self.run_id,
                status="cancelled",
                text=outcome.text,
                shutdown=outcome.shutdown,
                session_id=self.session_id,
                attempts=self.attempt,
                unsent=[*outcome.unsent, *self.unsent_behind] or None,
            )
        return RunResult(
            run_id=self.run_id,
            status=outcome.status,
            text=outcome.text,
            stop_reason=outcome.stop_reason,
            session_id=self.session_id,
            usage=Usage.model_validate(outcome.usage) if outcome.usage else None,
            attempts=self.attempt,
            error=ErrorInfo.model_validate(self.redactor.error(outcome.error.model_dump(by_alias=True)))
            if outcome.error
            else None,
        )


# The messages that carry an error's text (an agent's stderr tail, a provider's message).
_CARRY_ERRORS = frozenset({"terminal.failed", "run.retrying", "tool.failed"})


def _redacted(redactor: Redactor, kind: str, content: dict[str, Any]) -> dict[str, Any]:
    """A message's content with the secrets in its error text masked."""
    if kind == "terminal.failed":
        return {**content, "error": redactor.error(content["error"])}
    key = "reason" if kind == "run.retrying" else "error"
    text = content.get(key)
    return {**content, key: redactor.text(text)} if isinstance(text, str) else content
