"""The seam between the agent-neutral bridge and one agent CLI (pi, Claude Code).

Everything the bridge needs to know about an agent is behind `AgentAdapter`: how to build its
command line, how to read its output (an `EventMapper`), which signal interrupts it gracefully and
how to classify its errors. A second agent CLI is a new adapter, not a rewrite.

An agent with a live mode (one long-lived process taking prompt after prompt) exposes it as a
`LiveMode`, and each of its processes through a `LiveClient`: the rpc engine and the conversation
registry speak to those, never to an agent package.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import anyio
import anyio.abc

from bridge.contract import (
    ErrorInfo,
    ErrorKind,
    McpServerHttp,
    McpServerStdio,
    PromptImage,
    SandboxSettings,
    SessionHistory,
    SessionNotFound,
    SessionSummary,
    ShutdownReceipt,
    ThinkingLevel,
    ToolKind,
)
from bridge.process.framing import LineFramer, TailBuffer
from bridge.process.spawn import ChildProcess


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
    # A bridge command typed as the prompt (`/compact ...`): the attempt runs it instead.
    command: BridgeCommand | None = None
    # The user trusts the run's folder: the agent may load the folder's own settings, extensions
    # and prompts. False: it is told not to (project_trust.py decides).
    trusted: bool = False
    #: The conversation's MCP servers, and the private file (0600, in the bridge's state dir)
    #: that lists them whole in the MCP clients' common `{"mcpServers": {name: entry}}` form,
    #: secrets included: an agent is handed its path, never the values (argv and environment
    #: are readable by others; see bridge/runs/mcp_config.py).
    mcp_servers: tuple[McpServerStdio | McpServerHttp, ...] = ()
    mcp_config: str | None = None
    # How the agent's tool commands are confined (None: not at all).
    sandbox: SandboxSettings | None = None


BridgeCommandName = Literal["compact", "autocompact", "name", "export", "new"]


@dataclass(frozen=True, slots=True)
class BridgeCommand:
    """One of the bridge's own `/` commands, parsed from a prompt: its name and argument.

    `export_path` is where `/export` writes: the bridge's state dir, never the workspace.
    """

    name: BridgeCommandName
    argument: str = ""
    export_path: str | None = None


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """A `/` command the agent offers (an extension's, a prompt template, a skill)."""

    name: str
    description: str
    source: Literal["extension", "prompt", "skill"]
    argument_hint: str | None = None


@dataclass(frozen=True, slots=True)
class CommandDone:
    """What a bridge command did: the text the run answers, and for `/new` the fresh session."""

    text: str
    state: LiveState | None = None


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
    """The agent's own report of a file change it made: its patch (LF text) and first changed line.

    `original_known`: the agent also said what the file held before (`original`, None when it did
    not exist), read by the agent itself before the change, so it is right however late the
    bridge's own snapshot came.
    """

    call_id: str
    hunks: tuple[Hunk, ...] | None = None
    first_line: int | None = None
    original_known: bool = False
    original: str | None = None


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


LiveErrorKind = Literal["refused", "timeout", "closed"]
#: What the engine reads itself of a live agent's event line (see `LiveMode.event_kind`).
EventKind = Literal["settled", "run_end", "user_message"]
Lines = Callable[[list[bytes]], None]


class LiveError(Exception):
    """A command the live agent refused, did not answer in time, or could not take (closed).

    `error_kind` is the contract's kind of a refusal where the agent's words say it (a missing
    key is `auth`): the engine reports that instead of guessing from the command alone.
    """

    def __init__(
        self, message: str, command: str, *, kind: LiveErrorKind, error_kind: ErrorKind | None = None
    ) -> None:
        super().__init__(message)
        self.command = command
        self.kind = kind
        self.error_kind = error_kind


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One model a live agent can run: its provider, id and display name."""

    provider: str
    model_id: str
    name: str


@dataclass(frozen=True, slots=True)
class OpenedConversation:
    """A conversation opened ahead of its first prompt: its id and what its agent can run."""

    session_id: str
    provider: str | None
    model: str | None
    thinking: str | None
    models: tuple[ModelChoice, ...]
    thinking_levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LiveState:
    """What a live agent reports of itself: its session, model, thinking and history."""

    session_id: str | None = None
    session_file: str | None = None
    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    message_count: int | None = None


@dataclass(frozen=True, slots=True)
class ContextUsage:
    """How full the conversation's context window is."""

    tokens: int | None
    context_window: int
    percent: float | None


@dataclass(frozen=True, slots=True)
class SessionStats:
    """The conversation's context use and cost so far, for the terminal message."""

    context: ContextUsage | None = None
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ToolCheck:
    """A tool call the agent asks about before it runs it, in agent-neutral terms.

    The agent package names the kind and, where it has them, the shell command or the file path;
    `input` is the call's own arguments as the agent gave them.
    """

    tool_call_id: str
    tool: str
    kind: ToolKind
    input: Mapping[str, Any]
    command: str | None = None
    path: str | None = None
    #: For an edit or write: the change it would make, so the user sees the diff before it runs.
    change: ProposedChange | None = None


@dataclass(frozen=True, slots=True)
class ProposedChange:
    """What an edit or write would do to one file: its whole new text, or replacements of parts.

    The agent package reads it from the call's arguments; the bridge reads the file to show the
    diff. Each replacement is matched against the file as it is now, not after the others.
    """

    path: str
    content: str | None = None
    replacements: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolVerdict:
    """The answer to a `ToolCheck`: run it, or not (and the reason the model is given)."""

    allow: bool
    reason: str | None = None


FileOpName = Literal["read", "access", "write", "mkdir", "kind", "listdir", "search", "exec", "poll", "kill"]


@dataclass(frozen=True, slots=True)
class FileOp:
    """One file operation an agent's own tool hands to the bridge, in agent-neutral terms.

    `path` is absolute, as the agent resolved it. `read` answers the bytes, `access` nothing (or
    refused; `write` True: to write too), `write` puts `data`, `mkdir` makes a dir and its
    parents, `kind` says what the path is, `listdir` its names, `search` judges a tree's root.

    The agent's shell tool hands its command over the same way, for the editor's terminal
    (bridge/editor/editor_commands.py): `exec` runs `command` in `path` (its cwd), answered
    `local` when the editor runs none (the agent runs it itself) or with a `terminal_id`; `poll`
    answers that terminal's output so far (and its exit, `done`); `kill` ends it.
    """

    tool_call_id: str
    tool: str
    op: FileOpName
    path: str
    data: bytes | None = None
    write: bool = False
    command: str | None = None
    terminal_id: str | None = None


@dataclass(frozen=True, slots=True)
class FileOpResult:
    """The answer to a `FileOp`: `error` (the message the tool throws), or what it asked for."""

    error: str | None = None
    data: bytes | None = None
    kind: Literal["file", "dir", "other", "missing"] | None = None
    names: tuple[str, ...] | None = None
    #: A command's answers (see `FileOp`): run it yourself, or its terminal and how it stands.
    local: bool = False
    terminal_id: str | None = None
    output: str | None = None
    done: bool = False
    exit_code: int | None = None
    signal: str | None = None


#: Does one file operation (the run's file access policy); the live client awaits it.
DoFileOp = Callable[[FileOp], Awaitable[FileOpResult]]


DialogKind = Literal["select", "confirm", "input", "editor", "notify"]


@dataclass(frozen=True, slots=True)
class Dialog:
    """One of the agent's own dialogs (an extension asks its user), in agent-neutral terms.

    `notify` asks nothing (its `level` says how loud); the others block the agent until answered,
    and `timeout_ms` is the agent's own: past it, the agent answers itself.
    """

    kind: DialogKind
    title: str
    message: str | None = None
    options: tuple[str, ...] = ()
    placeholder: str | None = None
    prefill: str | None = None
    timeout_ms: int | None = None
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True, slots=True)
class DialogReply:
    """The user's answer to a `Dialog`: a value (select, input, editor), a yes or no (confirm),
    or cancelled."""

    value: str | None = None
    confirmed: bool | None = None
    cancelled: bool = False


DIALOG_CANCELLED: Final = DialogReply(cancelled=True)
#: Answers one of the agent's dialogs (a `notify` is only told, and its reply unused).
AskDialog = Callable[[Dialog], Awaitable[DialogReply]]


#: How long a live agent may take to accept a prompt of a conversation with MCP servers: it may
#: first wait for them to connect (pi, up to its own bound), longer than any other command takes.
MCP_PROMPT_ACCEPT_SECONDS: Final = 45.0
#: The environment variable naming the file (see `RunOptions.mcp_config`) the bridge's pi
#: extension registers a conversation's MCP servers from.
MCP_CONFIG_ENV: Final = "PI_BRIDGE_MCP_CONFIG"
#: The environment variable naming the directory an agent's gate reads each conversation's
#: permission mode from (a file per session id; none: `full`).
GATE_DIR_ENV: Final = "PI_BRIDGE_GATE_DIR"
#: Decides one tool call (the run's permission check); the live client awaits it.
AskTool = Callable[[ToolCheck], Awaitable[ToolVerdict]]


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
    """What the bridge must know about one agent CLI."""

    name: str
    #: How error texts name it ("pi", "Claude Code").
    display_name: str
    interrupt_signal: signal.Signals
    #: How to run it when nothing configures its command (its executable on PATH).
    default_command: tuple[str, ...]
    #: Whether the bridge can confine its tool commands (a run's `sandbox`).
    can_sandbox: bool

    def live_mode(self) -> LiveMode | None:
        """Its live mode (the rpc engine); None: every attempt is one process (the json engine)."""
        ...

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

    def project_resources(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """The files of `cwd` the agent loads only from a folder the user trusts, as the user
        reads them (a path relative to `cwd`); empty: nothing to ask. Blocking I/O."""
        ...

    def trust_roots(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """The files and folders a trust decision of `cwd` covers (relative to `cwd`, or
        absolute): the config the agent loads from a trusted folder, and what that config can
        pull in. Any change under them since the user trusted the folder asks again."""
        ...

    def file_change_watch(self, cwd: str) -> FileChangeWatch | None:
        """A fresh watch of the file-changing tool calls of one attempt in `cwd` (None: no diffs)."""
        ...

    def list_sessions(self, cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
        """The agent's stored sessions of `cwd`, newest first (`live` left False); blocking I/O."""
        ...

    def read_session(self, session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
        """One stored session's turns, as a live run would have streamed them; blocking I/O."""

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """Delete a stored session (its agent stopped first); whether there was one; blocking I/O."""

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The agent's credential files, which a sandboxed command of any agent never sees."""

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
