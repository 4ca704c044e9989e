"""The seam between the agent-neutral bridge and one agent CLI (pi, Claude Code).

Everything the bridge needs to know about an agent is behind `AgentAdapter`: how to build its
command line, how to read its output (an `EventMapper`), which signal interrupts it gracefully and
how to classify its errors. A second agent CLI is a new adapter, not a rewrite.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bridge.contract import (
    ErrorInfo,
    PromptImage,
    SessionHistory,
    SessionNotFound,
    SessionSummary,
    ShutdownReceipt,
    ThinkingLevel,
)


@dataclass(slots=True)
class Out:
    """One outbound message before the run stamps it with runId, attempt and seq.

    `content` already uses the wire's camelCase keys: the mapper writes it once and nothing
    copies or converts it on the hot path. Tests validate every produced message against the
    pydantic contract.
    """

    type: str
    content: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What one attempt needs from a run's params, in agent-neutral terms."""

    prompt: str
    cwd: str
    provider: str | None = None
    model: str | None = None
    thinking: ThinkingLevel | None = None
    tools: tuple[str, ...] | None = None
    session_id: str | None = None
    continue_session: bool = False
    live_thoughts: bool = False
    resumed: bool = False
    # `session_id` names a conversation the bridge opened ahead of its first prompt (ACP's
    # session/new) that the agent has not stored yet: the attempt starts the session under that id.
    new_session: bool = False
    images: tuple[PromptImage, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to start the agent: argv, environment additions, working dir and stdin bytes."""

    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""


@dataclass(frozen=True, slots=True)
class Hunk:
    """One hunk of a line patch: `old` lines (with their line ends) from line `old_start` became `new`."""

    old_start: int
    new_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FileChangeAnnounced:
    """A tool call that is about to change a file, seen at the earliest event that names it.

    `content` is the file's whole new text when the tool writes it verbatim (a write tool).
    """

    call_id: str
    path: str
    content: str | None = None


@dataclass(frozen=True, slots=True)
class FileChangeDone:
    """The agent's own report of a file change it made: its patch (LF text) and first changed line."""

    call_id: str
    hunks: tuple[Hunk, ...] | None = None
    first_line: int | None = None


class FileChangeWatch(Protocol):
    """Reads an agent's output lines for the tool calls that change files (see diff_capture.py)."""

    #: Bytes every line the watch cares about contains: other lines are not even passed to `feed`.
    prefilter: bytes

    def feed(self, line: bytes) -> Sequence[FileChangeAnnounced | FileChangeDone]:
        """The file changes one stdout line announces or reports (usually none, cheaply)."""
        ...


@dataclass(frozen=True, slots=True)
class WarmLaunch:
    """A launch worth pre-spawning for the next prompt: its spec (without stdin), the session it
    opens (None for a new one) and how long to wait before starting it."""

    spec: LaunchSpec
    session: str | None = None
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class SessionCheckpoint:
    """A stored session as it stood before a run's first attempt, for a retry to go back to.

    A failed attempt leaves its prompt (and the model's error) in the session it resumed, so the
    next attempt would show the model the prompt twice. `path` is the session's file then and
    `size` its length: the agents append, so those bytes are the whole conversation before the
    run. `path` None: the session was not stored yet (the run starts it, as `session_id` when the
    run names it, else under the id its first attempt announces).
    """

    session_id: str | None
    path: str | None = None
    size: int = 0


class EventMapper(Protocol):
    """Pure translation of an agent's stdout lines into contract messages.

    Every attempt ends with exactly one terminal message: the agent's own, or one of the
    `finish_*` calls, which also close open tool calls and deliver buffered thoughts.
    """

    @property
    def last_terminal(self) -> Out | None:
        """The terminal message produced, if any."""
        ...

    @property
    def wants_stop(self) -> bool:
        """Whether the agent should be stopped now (e.g. it is about to retry on its own)."""
        ...

    @property
    def text(self) -> str:
        """All assistant text of the attempt so far (the concatenation of the deltas sent)."""
        ...

    @property
    def session_id(self) -> str | None:
        """The agent's session id, once known."""
        ...

    @property
    def invalid_lines(self) -> list[str]:
        """A bounded sample of the output lines that could not be understood."""
        ...

    def feed(self, line: bytes) -> list[Out]:
        """Map one stdout line (without its newline) to zero or more messages."""
        ...

    def note_invalid(self, description: str) -> None:
        """Record a line that never reached `feed` (e.g. one over the length bound)."""
        ...

    def feed_oversized(self, description: str, head: bytes) -> list[Out]:
        """A line over the length bound, of which only `head` was kept: record it, and map what
        its head alone says (e.g. that it is the agent's end-of-run event)."""
        ...

    def finish_exited(self, exit_code: int | None, signal_name: str | None, stderr: str) -> list[Out]:
        """Close the attempt after the agent exited; a terminal.failed if it printed none."""
        ...

    def finish_failed(self, error: ErrorInfo) -> list[Out]:
        """Close the attempt as failed for a reason found by the bridge (timeout, stall...)."""
        ...

    def finish_cancelled(self, receipt: ShutdownReceipt) -> list[Out]:
        """Close the attempt as cancelled with the shutdown receipt."""
        ...


class AgentAdapter(Protocol):
    """What the bridge must know about one agent CLI."""

    name: str
    interrupt_signal: signal.Signals
    #: How to run it when nothing configures its command (its executable on PATH).
    default_command: tuple[str, ...]
    #: Whether it speaks a live rpc mode (the rpc engine); if not, every attempt is one process.
    supports_rpc: bool

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """Build the command line, environment and stdin for one attempt."""
        ...

    def new_mapper(self, options: RunOptions) -> EventMapper:
        """A fresh mapper for one attempt."""
        ...

    def session_exists(
        self, session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]
    ) -> bool:
        """Whether the run will resume an existing session (decided from the agent's files)."""
        ...

    def resolve_session_id(self, session_id: str, env: Mapping[str, str]) -> str | None:
        """The full id of the stored session `session_id` names (the agent decides which forms
        it takes: an id, a unique prefix, a path); None when none matches. Raises ValueError
        when it names several. Blocking I/O."""
        ...

    def checkpoint_session(self, options: RunOptions, env: Mapping[str, str]) -> SessionCheckpoint | None:
        """Where the session the run continues stands before its first attempt (None: which file
        the agent will open cannot be told, so no retry cuts one back); blocking I/O."""
        ...

    def rewind_session(
        self,
        checkpoint: SessionCheckpoint,
        announced: str | None,
        options: RunOptions,
        env: Mapping[str, str],
    ) -> RunOptions:
        """After a failed attempt (`announced`: the session it named), cut the session back to
        `checkpoint`; the options of the next attempt, which then shows the model the conversation
        as it was before the run and the prompt once. Blocking I/O."""
        ...

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """Describe a failure to start the agent."""
        ...

    def file_change_watch(self, cwd: str) -> FileChangeWatch | None:
        """A fresh watch of the file-changing tool calls of one attempt in `cwd` (None: no diffs)."""
        ...

    def list_sessions(self, cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
        """The agent's stored sessions of `cwd`, newest first (`live` left False); blocking I/O."""
        ...

    def read_session(self, session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
        """One stored session's turns, as a live run would have streamed them; blocking I/O."""

    def warm_launches(
        self, command: tuple[str, ...], options: RunOptions, session_created: str | None
    ) -> list[WarmLaunch]:
        """What to pre-spawn after a run with `options` ended (`session_created`: the session it
        created, if any), for the prompt most likely to come next."""
        ...

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """Configure the agent, in `workdir`, to use the OpenAI-compatible model at `base_url`
        as `provider`; return the environment that makes it read that configuration."""
        ...
