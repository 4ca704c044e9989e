"""The values that cross the seam between the bridge and an agent: options, launches, messages.

Plain data only; the protocols an agent implements are in seam.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bridge.contract import (
    ErrorKind,
    McpServerHttp,
    McpServerStdio,
    PromptImage,
    SandboxSettings,
    SessionHistory,
    ThinkingLevel,
    ToolKind,
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
    #: The argv a live agent's whole process starts under (its sandbox; empty: none), for an
    #: agent whose tools run inside it (seam.ConfinedWhole).
    launch_prefix: tuple[str, ...] = ()


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
    source: Literal["extension", "prompt", "skill", "agent"]
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
class OptionChoice:
    """One value of an agent's own option."""

    value: str
    name: str
    description: str | None = None


@dataclass(frozen=True, slots=True)
class AgentOption:
    """One of the agent's own session settings (an ACP agent's config option, or its modes as
    `SESSION_MODE`), which a front offers beside the bridge's own."""

    option_id: str
    name: str
    category: str | None
    current: str
    choices: tuple[OptionChoice, ...]
    description: str | None = None


#: The id of the `AgentOption` holding an agent's own session modes (ACP `session/set_mode`).
SESSION_MODE: Final = "session_mode"


@dataclass(frozen=True, slots=True)
class OpenedConversation:
    """A conversation opened ahead of its first prompt: its id and what its agent can run."""

    session_id: str
    provider: str | None
    model: str | None
    thinking: str | None
    models: tuple[ModelChoice, ...]
    thinking_levels: tuple[str, ...]
    #: The agent's own settings beside the model (an ACP agent's modes and config options).
    agent_options: tuple[AgentOption, ...] = ()
    #: The history the agent replayed as it loaded the session (an ACP agent's session/load).
    replayed: SessionHistory | None = None


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

    @classmethod
    def of_call(
        cls,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        tools: AgentTools,
        path: object,
        change: ProposedChange | None,
    ) -> ToolCheck:
        """The check of one call of an agent's `tools`: its kind, its shell command, its path."""
        command = arguments.get("command")
        return cls(
            tool_call_id=call_id,
            tool=tool,
            kind=tools.kind(tool),
            input=arguments,
            command=command if tool == tools.shell and isinstance(command, str) else None,
            path=path if isinstance(path, str) else None,
            change=change,
        )


@dataclass(frozen=True, slots=True)
class AgentTools:
    """How an agent names its tools: those that only read, those that edit, and its shell."""

    reads: frozenset[str]
    edits: frozenset[str]
    shell: str

    def kind(self, tool: str) -> ToolKind:
        """What a call of `tool` does, as the contract names it."""
        if tool in self.reads:
            return "read"
        if tool in self.edits:
            return "edit"
        return "execute" if tool == self.shell else "other"


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
    (bridge/runs/editor_commands.py): `exec` runs `command` in `path` (its cwd), answered
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
