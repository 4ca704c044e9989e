"""The seam between the agent-neutral bridge and one agent CLI: the protocols an agent implements."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.abc

from bridge.agents.values import (
    AgentCommand,
    AgentOption,
    AskDialog,
    AskTool,
    BridgeCommand,
    CommandDone,
    DoFileOp,
    EventKind,
    FileChangeAnnounced,
    FileChangeDone,
    LaunchSpec,
    Lines,
    LiveState,
    ModelChoice,
    Out,
    RunOptions,
    SessionCheckpoint,
    SessionStats,
    WarmLaunch,
)
from bridge.contract import (
    ErrorInfo,
    ErrorKind,
    PromptImage,
    SessionHistory,
    SessionNotFound,
    SessionSummary,
    ShutdownReceipt,
)
from bridge.process.framing import LineFramer, TailBuffer
from bridge.process.spawn import ChildProcess


class FileChangeWatch(Protocol):
    """Reads an agent's output lines for the tool calls that change files (see diff_capture.py)."""

    #: Bytes every line the watch cares about contains: other lines are not even passed to `feed`.
    prefilter: bytes

    def feed(self, line: bytes) -> Sequence[FileChangeAnnounced | FileChangeDone]:
        """The file changes one stdout line announces or reports (usually none, cheaply)."""
        ...


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


class LiveCommand(Protocol):
    """A command written to a live agent, whose answer is awaited later."""

    name: str


class LiveClient(Protocol):
    """The client side of one live agent process: commands, its event lines, its end.

    Event lines go, in the batches they were read in, to `listener` (the attempt streaming now);
    `closed` is set once the agent closed its output.
    """

    stderr: TailBuffer
    closed: anyio.Event
    listener: Lines | None
    #: Awaited before each read while a listener is set: what the listener holds back bounds reading.
    backlog: Callable[[], Awaitable[None]] | None

    @property
    def holding_back(self) -> bool:
        """Whether the agent waits on the bridge now: its output not read, or a tool call it asked
        about not yet decided (its quiet then is the bridge's or the user's, not its own)."""
        ...

    #: When reading last resumed after holding back.
    reading_since: float
    framer: LineFramer
    #: Every stdout line read, answers included: zero means the agent never spoke.
    lines_read: int
    #: The process is an adapter that runs the agent as its child (pi-acp runs pi): the processes
    #: it holds before a prompt are kept after it (those alone, not what they start meanwhile).
    runs_agent_as_child: bool
    #: Decides the tool calls the agent asks about (set per attempt); None: each is denied.
    asks: AskTool | None
    #: Answers the agent's own dialogs (set per attempt); None: each is answered cancelled.
    dialogs: AskDialog | None
    #: Does the file operations the agent's tools hand over (set per attempt); None: refused.
    file_ops: DoFileOp | None

    @property
    def asks_before_changes(self) -> bool:
        """Whether the agent asks the bridge (`asks`) before each tool that may change a file."""
        ...

    @property
    def run_end_line(self) -> bytes:
        """The line that ends a run for the mapper, fed once the agent settled (the engine holds
        the agent's own back until then): pi's a bare end event, Claude Code's `result` line."""
        ...

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read the agent's stdout and stderr until its stdout closes."""
        ...

    def take_held(self) -> list[bytes]:
        """What the agent told the user while no attempt listened (its start-up notices), once:
        the next attempt streams it first."""
        ...

    async def prepare(self) -> LiveState:
        """Configure a freshly started agent (no retries of its own) and return its state."""
        ...

    async def switch_session(self, session_file: str) -> LiveState:
        """Load a stored session into this agent; its state afterwards. Raises LiveError."""
        ...

    async def set_model(self, provider: str, model: str) -> None:
        """Switch the model for the next prompt."""
        ...

    async def set_thinking(self, level: str) -> None:
        """Set the thinking level for the next prompt."""
        ...

    async def available_models(self) -> tuple[ModelChoice, ...]:
        """Every model the agent can run."""
        ...

    async def thinking_levels(self) -> list[str]:
        """The thinking levels the current model supports."""
        ...

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> LiveCommand:
        """Write a prompt now (its run streams as events); its acceptance is awaited with `delivered`."""
        ...

    async def delivered(self, pending: LiveCommand, timeout: float = ...) -> dict[str, Any]:
        """Wait (bounded) until the agent has read a command written now and answered it."""
        ...

    async def answer(self, pending: LiveCommand, timeout: float = ...) -> dict[str, Any]:
        """Wait (bounded) for the answer to a sent command."""
        ...

    async def steer(self, text: str) -> None:
        """Queue a steering message for the running run."""
        ...

    async def abort(self, timeout: float) -> None:
        """Abort the run; the agent answers once it has settled."""
        ...

    def send_abort_now(self) -> LiveCommand:
        """Write an abort now (from a synchronous callback too); its answer is awaited with `answer`."""
        ...

    def send_clear_queue_now(self) -> LiveCommand | None:
        """Take the run's queued messages (steers, follow-ups) out of the agent now, written just
        before its abort so that the abort goes on with none of them; None when the agent holds
        no queue of a run's messages. Its answer is read with `unsent`."""
        ...

    async def unsent(self, command: LiveCommand, timeout: float = ...) -> list[str]:
        """The texts `send_clear_queue_now` took out of the agent, in the order they were queued."""
        ...

    async def stats(self, timeout: float = ...) -> SessionStats:
        """The conversation's context use and cost."""
        ...

    async def commands(self) -> list[AgentCommand]:
        """The `/` commands the agent offers now. Raises LiveError."""
        ...

    async def run_command(self, command: BridgeCommand) -> CommandDone:
        """Run a bridge command on this agent (its events stream to `listener` meanwhile).
        Raises LiveError, kind "refused" when the agent cannot do it."""
        ...

    async def rename(self, title: str) -> None:
        """Give the conversation a title. Raises LiveError."""
        ...

    async def clone(self) -> LiveState:
        """Continue the conversation as it is now on a new session (the old one left as it was);
        the agent's state after. Raises LiveError, kind "refused" when the agent cannot."""
        ...

    async def fork_before(self, prompt: str, ordinal: int) -> LiveState:
        """Continue the conversation from before one of its prompts (its `ordinal`-th, whose text
        is `prompt`) on a new session, the old one left as it was; the agent's state after.
        Raises LiveError, kind "refused" when the agent cannot."""
        ...

    def close_stdin(self) -> None:
        """Ask the agent for an orderly exit."""
        ...


class LiveMode(Protocol):
    """What an engine needs of an agent that serves a conversation from one long-lived process."""

    def launch_spec(
        self, command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
    ) -> LaunchSpec:
        """The launch of a live agent for a conversation (`new_session_id`: start that session)."""
        ...

    def client(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> LiveClient:
        """The client of a live agent process just spawned."""
        ...

    def event_kind(self, line: bytes) -> EventKind | None:
        """The events the engine reads itself: "settled" (the agent will not go on by itself),
        "run_end" (one low-level run ended), "user_message" (a user message taken into the run);
        None for every other line (they go to the mapper)."""
        ...

    def user_text(self, line: bytes) -> str | None:
        """The text of a user message event."""
        ...

    def latest_session_id(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """The id of the newest session of `cwd` (what continuing would open); blocking I/O."""
        ...

    def session_stored(self, session_id: str, cwd: str, env: Mapping[str, str]) -> bool:
        """Whether the agent has stored session `session_id`; blocking I/O."""
        ...

    def session_file(self, session_id: str, cwd: str, env: Mapping[str, str]) -> str | None:
        """The stored file of session `session_id` (None: not stored); blocking I/O."""
        ...

    def session_mark(self, path: str | None) -> int | None:
        """A mark of a session file now, before a prompt, to cut it back to if that prompt is
        retried (None when the agent has not written it yet)."""
        ...

    def cut_session_back(self, path: str, mark: int | None) -> None:
        """Cut a session file back to `mark` (None: its header only, or none); blocking I/O."""
        ...

    def classify_exit(
        self, exit_code: int | None, signal_name: str | None, stderr: str
    ) -> tuple[ErrorKind, bool]:
        """(kind, retryable) of an agent that ended without a terminal event."""
        ...

    def lacks_live_mode(self, stderr: str) -> bool:
        """Whether the agent's stderr says it has no live mode at all."""
        ...

    def silence_may_mean_no_live_mode(self) -> bool:
        """Whether a first start that never answers may be a CLI reading stdin for something
        else (then its prompts run one process each); False: it is only a slow start, a
        visible and retryable failure."""
        ...


class AgentAdapter(Protocol):
    """What the bridge must know about every agent CLI.

    What only some agents can do is a capability below (`StoredHistory`, `RewindsSessions`,
    `ProjectFiles`, `WarmsLaunches`, `ScriptedModelSetup`): an adapter offers it by having its
    members, and the bridge asks `isinstance(adapter, Capability)`.
    """

    name: str
    #: How error texts name it ("pi", "Claude Code").
    display_name: str
    interrupt_signal: signal.Signals
    #: How to run it when nothing configures its command (its executable on PATH).
    default_command: tuple[str, ...]
    #: Whether the bridge can confine its tool commands (a run's `sandbox`).
    can_sandbox: bool

    def live_mode(self) -> LiveMode | None:
        """Its live mode (one process per conversation); None: every attempt is one process."""
        ...

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """Build the command line, environment and stdin for one attempt."""
        ...

    def new_mapper(self, options: RunOptions) -> EventMapper:
        """A fresh mapper for one attempt."""
        ...

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """Describe a failure to start the agent."""
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

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """Delete a stored session (its agent stopped first); whether there was one; blocking I/O."""
        ...

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The agent's credential files, which a sandboxed command of any agent never sees."""
        ...

    def file_change_watch(self, cwd: str) -> FileChangeWatch | None:
        """A fresh watch of the file-changing tool calls of one attempt in `cwd` (None: no diffs)."""
        ...


@runtime_checkable
class StoredHistory(Protocol):
    """An agent whose stored sessions the bridge lists and reads back."""

    def list_sessions(self, cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
        """The agent's stored sessions of `cwd`, newest first (`live` left False); blocking I/O."""
        ...

    def read_session(self, session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
        """One stored session's turns, as a live run would have streamed them; blocking I/O."""
        ...


@runtime_checkable
class RewindsSessions(Protocol):
    """An agent whose session a retry can cut back to where it stood before the run."""

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


@runtime_checkable
class ProjectFiles(Protocol):
    """An agent that loads files of a folder only when the user trusts that folder."""

    def project_resources(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """The files of `cwd` the agent loads only from a folder the user trusts, as the user
        reads them (a path relative to `cwd`); empty: nothing to ask. Blocking I/O."""
        ...

    def trust_roots(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """The files and folders a trust decision of `cwd` covers (relative to `cwd`, or
        absolute): the config the agent loads from a trusted folder, and what that config can
        pull in. Any change under them since the user trusted the folder asks again."""
        ...


def trust_roots(adapter: AgentAdapter, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """What a trust decision of `cwd` covers for `adapter` (none when it loads no project files)."""
    return adapter.trust_roots(cwd, env) if isinstance(adapter, ProjectFiles) else ()


@runtime_checkable
class WarmsLaunches(Protocol):
    """An agent whose next process can be started before its prompt comes."""

    def warm_launches(
        self, command: tuple[str, ...], options: RunOptions, session_created: str | None
    ) -> list[WarmLaunch]:
        """What to pre-spawn after a run with `options` ended (`session_created`: the session it
        created, if any), for the prompt most likely to come next."""
        ...


@runtime_checkable
class ConfinedWhole(Protocol):
    """An agent that runs its tools itself, so a sandbox confines its whole process (the
    launch's `RunOptions.launch_prefix`): what it must still write, and what its model needs."""

    def own_dirs(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The dirs (and files) it keeps its own state in, for its launch environment `env`."""
        ...

    def model_vars(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The names in `env` its model needs, kept though they may name a credential."""
        ...


@runtime_checkable
class ScriptedModelSetup(Protocol):
    """An agent the demo and the tests can point at the bridge's scripted model."""

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """Configure the agent, in `workdir`, to use the OpenAI-compatible model at `base_url`
        as `provider`; return the environment that makes it read that configuration."""
        ...


@runtime_checkable
class OwnOptions(Protocol):
    """A live client whose agent has settings of its own beside the model (an ACP agent's modes
    and config options): a front offers them, and sets them through the agent."""

    async def agent_options(self) -> tuple[AgentOption, ...]:
        """The agent's own options as they are now."""
        ...

    async def set_agent_option(self, option_id: str, value: str) -> tuple[AgentOption, ...]:
        """Set one through the agent; its options as the agent answered."""
        ...


@runtime_checkable
class RecordedSessions(Protocol):
    """An agent that keeps its sessions where the bridge cannot read them (an ACP agent): the
    bridge keeps its own record of those it opened on it (runs/session_record.py), so one closed,
    or opened before a restart, is found and loaded again on this agent."""

    def own_session_id(self, session_id: str) -> str | None:
        """The agent's own id of a session this bridge opened on it (None: not one it knows)."""
        ...

    def adopt_session(self, session_id: str, own_id: str) -> None:
        """A session of the bridge's record: known from now on, loaded again by `own_id`."""
        ...


@runtime_checkable
class ReplaysHistory(Protocol):
    """A live client whose agent replays a session's history as it loads it (ACP's
    session/load): a front that loads the session shows it to the editor once."""

    def take_replayed(self) -> SessionHistory | None:
        """The history the agent replayed when this process loaded its session, handed out once
        (None: a new session, or taken already)."""
        ...
