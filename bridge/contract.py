"""The pi-bridge wire contract (v1): method names, params, messages and results as pydantic models."""

from __future__ import annotations

import binascii
import functools
import json
import sys
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

PROTOCOL_VERSION = 1
SERVER_NAME = "pi-bridge"

# Method names, defined once. Editor clients mirror these constants once each.
RUN = "pi/run"
CANCEL = "pi/cancel"
RUNS = "pi/runs"
SESSIONS = "pi/sessions"
SESSION = "pi/session"
MESSAGE = "pi/message"
STEER = "pi/steer"
CLOSE_SESSION = "pi/closeSession"

REQUEST_CANCELLED = -32800
INVALID_PARAMS = -32602

RUN_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"

ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
MessageType = Literal[
    "session.started",
    "session.resumed",
    "assistant",
    "assistant.thought",
    "tool.call",
    "tool.update",
    "tool.completed",
    "tool.failed",
    "terminal.completed",
    "terminal.failed",
    "terminal.cancelled",
    "run.retrying",
    "run.queued",
    "run.steered",
    "notice",
    "permission.requested",
    "permission.resolved",
    "session.compacting",
    "session.compacted",
    "session.renamed",
    "plan",
]
TERMINAL_TYPES: frozenset[str] = frozenset({"terminal.completed", "terminal.failed", "terminal.cancelled"})
ErrorKind = Literal[
    "spawn",
    "usage",
    "auth",
    "model_not_found",
    "rate_limit",
    "server",
    "network",
    "model",
    "agent_retry",
    "process",
    "stalled",
    "timeout",
    "session",
    "busy",
    "internal",
    "sandbox",
]
RunStatus = Literal["completed", "failed", "cancelled"]
RunState = Literal["queued", "starting", "running", "backoff", "stopping"]
ShutdownStage = Literal["exited", "interrupted", "killed"]
Engine = Literal["rpc", "json"]
Containment = Literal["cgroup", "tree"]


class WireModel(BaseModel):
    """Base of every wire model: camelCase aliases, unknown keys rejected."""

    # defer_build: each model's validator is built on first use, off the server's start-up path.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, defer_build=True
    )


# --------------------------------------------------------------------------- inbound params


class RetryPolicy(WireModel):
    """Caller-side retry policy of the orchestration layer (never of the provider)."""

    model_config = ConfigDict(strict=True)

    max_attempts: int = Field(1, ge=1, le=10)
    initial_delay_ms: int = Field(500, ge=0, le=600_000)
    max_delay_ms: int = Field(10_000, ge=0, le=600_000)


ImageMimeType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
MAX_IMAGES: Final = 8
MAX_IMAGE_BASE64_CHARS: Final = 16 * 1024 * 1024


class PromptImage(WireModel):
    """An image handed to the model with the prompt (a screenshot pasted into the chat)."""

    model_config = ConfigDict(strict=True)

    mime_type: ImageMimeType
    # base64 (standard alphabet, padded), as the providers take it
    data: str = Field(min_length=4, max_length=MAX_IMAGE_BASE64_CHARS)

    @field_validator("data")
    @classmethod
    def _is_base64(cls, value: str) -> str:
        try:
            binascii.a2b_base64(value, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"not base64: {exc}") from None
        return value


# MCP servers of a conversation (docs/protocol.md, the conversation toolbox), in
# ACP's shape. Names as the agents take them (pi and Claude Code name their tools
# `mcp__<server>__<tool>`); env values and headers can be secrets: the bridge never logs them.
MAX_MCP_SERVERS: Final = 64
MAX_MCP_ITEMS: Final = 256
MAX_MCP_TEXT: Final = 16_384
MCP_NAME_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}$"
ENV_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]{0,255}$"
HEADER_NAME_PATTERN: Final = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$"
McpText = Annotated[str, Field(max_length=MAX_MCP_TEXT)]


class McpEnvVariable(WireModel):
    """One environment variable of a stdio MCP server (ACP's `EnvVariable`)."""

    model_config = ConfigDict(strict=True)

    name: str = Field(pattern=ENV_NAME_PATTERN)
    value: McpText
    meta: dict[str, Any] | None = Field(None, alias="_meta")

    @field_validator("value")
    @classmethod
    def _value_has_no_nul(cls, value: str) -> str:
        return _no_nul(value)


class McpHeader(WireModel):
    """One HTTP header of an http MCP server (ACP's `HttpHeader`)."""

    model_config = ConfigDict(strict=True)

    name: str = Field(pattern=HEADER_NAME_PATTERN)
    value: McpText

    meta: dict[str, Any] | None = Field(None, alias="_meta")

    @field_validator("value")
    @classmethod
    def _value_is_one_line(cls, value: str) -> str:
        if any(c in value for c in "\r\n\x00"):
            raise ValueError("must not contain CR, LF or NUL")
        return value


class McpServerStdio(WireModel):
    """An MCP server the agent starts and speaks to over stdio (ACP's `McpServerStdio`)."""

    model_config = ConfigDict(strict=True)

    type: Literal["stdio"] = "stdio"
    name: str = Field(pattern=MCP_NAME_PATTERN)
    command: str = Field(min_length=1, max_length=MAX_MCP_TEXT)
    args: list[McpText] = Field(default_factory=list, max_length=MAX_MCP_ITEMS)
    env: list[McpEnvVariable] = Field(default_factory=list, max_length=MAX_MCP_ITEMS)
    meta: dict[str, Any] | None = Field(None, alias="_meta")

    @field_validator("command")
    @classmethod
    def _command_has_no_nul(cls, value: str) -> str:
        return _no_nul(value)

    @field_validator("args")
    @classmethod
    def _args_have_no_nul(cls, value: list[str]) -> list[str]:
        for arg in value:
            _no_nul(arg)
        return value


class McpServerHttp(WireModel):
    """An MCP server the agent reaches over streamable HTTP (ACP's `McpServerHttp`)."""

    model_config = ConfigDict(strict=True)

    type: Literal["http"]
    name: str = Field(pattern=MCP_NAME_PATTERN)
    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=MAX_MCP_TEXT)
    headers: list[McpHeader] = Field(default_factory=list, max_length=MAX_MCP_ITEMS)
    meta: dict[str, Any] | None = Field(None, alias="_meta")


def _mcp_transport(value: Any) -> str:
    """Which transport an entry names: its `type` (ACP's stdio entries have none: stdio)."""
    kind = value.get("type", "stdio") if isinstance(value, dict) else getattr(value, "type", "stdio")
    return kind if isinstance(kind, str) else "?"


McpServer = Annotated[
    Annotated[McpServerStdio, Tag("stdio")] | Annotated[McpServerHttp, Tag("http")],
    Discriminator(
        _mcp_transport,
        custom_error_type="mcp_transport",
        custom_error_message="type must be 'stdio' (or absent) or 'http'; sse and acp are not supported",
    ),
]


def _unique_servers(servers: list[McpServerStdio | McpServerHttp]) -> list[McpServerStdio | McpServerHttp]:
    """Two servers whose names differ only in `-` and `_` are one to the agents: refused."""
    seen: dict[str, str] = {}
    for server in servers:
        key = server.name.replace("-", "_")
        if key in seen:
            raise ValueError(f"MCP server names {seen[key]!r} and {server.name!r} name the same server")
        seen[key] = server.name
    return servers


#: A conversation's MCP servers: each name once (`-` and `_` count as one).
McpServers = Annotated[list[McpServer], AfterValidator(_unique_servers)]


#: How much a conversation's agent may do without asking (docs/protocol.md).
PermissionMode = Literal["ask", "auto-edit", "plan", "full"]


#: What the agent's tool commands may touch (docs/protocol.md, sandbox).
SandboxMode = Literal["off", "workspace-write", "read-only"]


class SandboxSettings(WireModel):
    """`initializationOptions.sandbox` and a run's `sandbox`: how the agent's commands are confined.

    `network` is off unless asked for: a sandbox that lets a command post the workspace anywhere
    protects little. It means nothing with `mode: "off"`.
    """

    model_config = ConfigDict(strict=True)

    mode: SandboxMode = "off"
    network: bool = False


class SandboxInfo(WireModel):
    """What confines a session's tool commands (session.started's `sandbox`)."""

    kind: Literal["bwrap", "none"]
    mode: SandboxMode
    network: bool


class SandboxAvailability(WireModel):
    """Whether this machine can sandbox the agents' commands (initialize's `sandbox`): when not,
    why and the fix."""

    available: bool
    kind: Literal["bwrap", "none"]
    reason: str | None = None
    fix: str | None = None


class RunParams(WireModel):
    """Params of `pi/run`."""

    model_config = ConfigDict(strict=True)  # "1", 1.0 or "yes" are type errors, not coerced

    prompt: str = Field(min_length=1)
    run_id: str | None = Field(None, pattern=RUN_ID_PATTERN)
    cwd: str | None = None
    provider: str | None = Field(None, min_length=1)
    model: str | None = Field(None, min_length=1)
    thinking: ThinkingLevel | None = None
    tools: list[str] | None = None
    session_id: str | None = Field(None, min_length=1, max_length=256)
    continue_session: bool = False
    retry: RetryPolicy | None = None
    live_thoughts: bool = False
    deadline_ms: int | None = Field(None, ge=1, le=86_400_000)
    # Which agent CLI runs the prompt (initialize lists them); default: the session's agent, else
    # `defaultAgent`, else "pi".
    agent: str | None = Field(None, min_length=1, max_length=64)
    # Images go with the prompt to a model that takes images (pi's rpc mode: a live conversation).
    images: list[PromptImage] | None = Field(None, max_length=MAX_IMAGES)
    # The conversation's permission mode from this run's next tool call on (as pi/setMode sets it).
    mode: PermissionMode | None = None
    # The conversation's MCP servers (default: initializationOptions.mcpServers); a live agent
    # started with another set is not reused.
    mcp_servers: McpServers | None = Field(None, max_length=MAX_MCP_SERVERS)

    # How this run's tool commands are confined (default: initializationOptions.sandbox, else off).
    sandbox: SandboxSettings | None = None


class CancelParams(WireModel):
    """Params of `pi/cancel`."""

    model_config = ConfigDict(strict=True)

    run_id: str = Field(pattern=RUN_ID_PATTERN)


class SteerParams(WireModel):
    """Params of `pi/steer`: a steering message for a running run of a live conversation."""

    model_config = ConfigDict(strict=True)

    run_id: str = Field(pattern=RUN_ID_PATTERN)
    message: str = Field(min_length=1)


class CloseSessionParams(WireModel):
    """Params of `pi/closeSession`."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)


class SessionsParams(WireModel):
    """Params of `pi/sessions`: the sessions of `cwd` (default: the workspace), newest first."""

    model_config = ConfigDict(strict=True)

    cwd: str | None = Field(None, min_length=1)
    limit: int = Field(50, ge=1, le=1000)


class SessionParams(WireModel):
    """Params of `pi/session`: one session's history."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)


#: How the bridge speaks to an agent (initializationOptions.agents, object form).
AgentProtocol = Literal["pi", "claude", "codex", "acp"]


class AgentSetting(WireModel):
    """An agent of `initializationOptions.agents` in the object form: its command, how the bridge
    speaks to it (absent: as to the known agent of that name), and its own environment."""

    command: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    protocol: AgentProtocol | None = None
    env: dict[str, str] | None = None


def _agent_form(value: Any) -> str:
    """Which form an `agents` entry takes: a command (argv) or the object form."""
    return "setting" if isinstance(value, dict | AgentSetting) else "command"


#: An entry of `initializationOptions.agents`: a command, or an AgentSetting.
AgentEntry = Annotated[
    Annotated[list[str], Tag("command")] | Annotated[AgentSetting, Tag("setting")],
    Discriminator(_agent_form),
]


class InitializationOptions(WireModel):
    """`initializationOptions` of `initialize`; every field defaulted, bad values warn and default."""

    pi_command: list[str] | None = Field(None, min_length=1)
    retry: RetryPolicy | None = None
    max_concurrent_runs: int = Field(8, ge=1, le=256)
    queue_when_busy: bool = True
    silence_timeout_ms: int | None = Field(None, ge=100)
    warm_pool: bool = True
    warm_pool_ttl_ms: int = Field(300_000, ge=1_000, le=86_400_000)
    env: dict[str, str] | None = None
    engine: Engine = "rpc"
    max_live_sessions: int = Field(4, ge=1, le=256)
    session_idle_ms: int = Field(600_000, ge=1_000, le=86_400_000)
    # Agent name -> its command (argv) or an AgentSetting; "pi" defaults to piCommand, every other
    # known agent to its default command on PATH.
    agents: dict[str, AgentEntry] | None = None
    default_agent: str | None = Field(None, min_length=1, max_length=64)
    # For agents with a permission system (see README "Agents"); others ignore them.
    permission_mode: str | None = Field(None, min_length=1, max_length=64)
    allowed_tools: list[str] | None = None
    # The permission mode of every conversation until pi/setMode or a run's `mode` changes it.
    default_mode: PermissionMode | None = None
    # A checkpoint of the workspace before every prompt (pi/checkpoints, pi/rewind).
    checkpoints: bool = True
    # The MCP servers of a run (or ACP session) that names none.
    mcp_servers: McpServers | None = Field(None, max_length=MAX_MCP_SERVERS)

    # How every run's tool commands are confined unless the run says otherwise.
    sandbox: SandboxSettings | None = None
    # pi has no plan tool: the bridge's extension offers the model a `todo` tool, whose list
    # comes out as `plan` messages. Off: the model is not offered it.
    plan_tool: bool = False


# --------------------------------------------------------------------------- message content


class SessionContent(WireModel):
    """Content of session.started / session.resumed."""

    session_id: str
    cwd: str
    session_file: str | None = None
    pi_version: int | str | None = None
    sandbox: SandboxInfo | None = None


class AssistantContent(WireModel):
    """Content of assistant: the NEW text only."""

    text: str


class ThoughtContent(WireModel):
    """Content of assistant.thought; `live` marks a streamed fragment (liveThoughts)."""

    text: str
    live: bool | None = None


class ToolCallContent(WireModel):
    """Content of tool.call; `parentToolCallId` names the tool call of the subagent that made it."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    parent_tool_call_id: str | None = None


class ToolUpdateContent(WireModel):
    """Content of tool.update: the tool's output so far (cumulative)."""

    tool_call_id: str
    output: str


class FileDiff(WireModel):
    """A file a tool changed: its text before (None: the file is new) and after the tool ran.

    Files over 1 MiB carry only `path` and `line`, as does anything not read (not a regular
    file, unreadable, or not read in time).
    """

    path: str
    old_text: str | None = None
    new_text: str | None = None
    line: int | None = Field(None, ge=1)


class ToolCompletedContent(WireModel):
    """Content of tool.completed; `diff` when the tool changed a file (edit, write)."""

    tool_call_id: str
    name: str
    output: str
    truncated: bool | None = None
    full_output_path: str | None = None
    cancelled: bool | None = None
    diff: FileDiff | None = None


class ToolFailedContent(WireModel):
    """Content of tool.failed; `reason: "denied"` when the bridge refused the call (a rule, the
    mode or the user), and the model was told why in `error`."""

    tool_call_id: str
    name: str
    error: str
    cancelled: bool | None = None
    reason: Literal["denied"] | None = None


class Usage(WireModel):
    """Token usage of an attempt, as pi reports it."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: float | None = None


class ErrorInfo(WireModel):
    """Why an attempt failed."""

    kind: ErrorKind
    message: str
    retryable: bool
    exit_code: int | None = None
    signal: str | None = None
    stderr: str | None = None
    invalid_output_lines: list[str] | None = None


class ShutdownReceipt(WireModel):
    """What the three-stage shutdown did: the stage that ended it, time, every pid, survivors."""

    stage: ShutdownStage
    elapsed_ms: float
    pids: list[int]
    survivors: list[int]
    # How the run's processes were found: its own cgroup (nothing escapes it) or the tree search.
    containment: Containment = "tree"
    agent_kept: bool = False


class ContextUsage(WireModel):
    """How full the conversation's context window is, as pi estimates it (tokens may be null
    right after a compaction)."""

    tokens: int | None
    context_window: int
    percent: float | None


class TerminalCompletedContent(WireModel):
    """Content of terminal.completed."""

    text: str
    stop_reason: str
    usage: Usage | None = None
    context_usage: ContextUsage | None = None
    session_cost: float | None = None


class TerminalFailedContent(WireModel):
    """Content of terminal.failed."""

    error: ErrorInfo
    text: str


class TerminalCancelledContent(WireModel):
    """Content of terminal.cancelled."""

    text: str
    shutdown: ShutdownReceipt


class RunRetryingContent(WireModel):
    """Content of run.retrying, sent between attempts."""

    attempt: int
    delay_ms: int
    reason: str


class RunQueuedContent(WireModel):
    """Content of run.queued: the run waits for one of `limit` slots.

    `reason`: "runs" (the concurrency limit), "session" (another run of its conversation goes
    on), "live" (every one of `limit` live agents is busy); absent means "runs".
    """

    position: int
    limit: int
    reason: Literal["runs", "session", "live"] | None = None


class RunSteeredContent(WireModel):
    """Content of run.steered: pi took this steering message into the conversation."""

    text: str


class NoticeContent(WireModel):
    """Content of notice: something the agent (an extension of it) told the user, or a dialog of
    its that this client could not answer and that was cancelled."""

    level: Literal["info", "warning", "error"]
    text: str


OptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionOption(WireModel):
    """One answer the user may give to a permission request; an `_always` one carries its rule."""

    option_id: str
    kind: OptionKind
    name: str
    rule: PermissionRule | None = None


class PermissionRequestedContent(WireModel):
    """Content of permission.requested: a tool call waits for the user's decision."""

    tool_call_id: str
    tool: str
    title: str
    options: list[PermissionOption]


class PermissionResolvedContent(WireModel):
    """Content of permission.resolved: how a tool call that needed a decision was decided."""

    tool_call_id: str
    decision: Literal["allow", "reject", "cancelled"]
    by: Literal["user", "rule", "mode"]
    option_id: str | None = None
    rule: PermissionRule | None = None


class CompactingContent(WireModel):
    """Content of session.compacting: the agent began to summarize the conversation's context."""

    reason: Literal["manual", "threshold", "overflow"]


class CompactedContent(WireModel):
    """Content of session.compacted: the context was summarized (its size before and after, as
    far as the agent knows them); a failed or aborted compaction says so in `error`."""

    tokens_before: int | None = None
    tokens_after: int | None = None
    error: str | None = None


class RenamedContent(WireModel):
    """Content of session.renamed: the conversation's title now."""

    title: str


class PlanEntry(WireModel):
    """One entry of the agent's plan (ACP's `PlanEntry`)."""

    content: str
    status: Literal["pending", "in_progress", "completed"]
    priority: Literal["high", "medium", "low"] | None = None


class PlanContent(WireModel):
    """Content of plan: the whole current plan, sent each time it changes."""

    entries: list[PlanEntry]


class _MessageBase(WireModel):
    run_id: str
    attempt: int = Field(ge=1)
    seq: int = Field(ge=1)


class SessionStartedMessage(_MessageBase):
    type: Literal["session.started"]
    content: SessionContent


class SessionResumedMessage(_MessageBase):
    type: Literal["session.resumed"]
    content: SessionContent


class AssistantMessage(_MessageBase):
    type: Literal["assistant"]
    content: AssistantContent


class ThoughtMessage(_MessageBase):
    type: Literal["assistant.thought"]
    content: ThoughtContent


class ToolCallMessage(_MessageBase):
    type: Literal["tool.call"]
    content: ToolCallContent


class ToolUpdateMessage(_MessageBase):
    type: Literal["tool.update"]
    content: ToolUpdateContent


class ToolCompletedMessage(_MessageBase):
    type: Literal["tool.completed"]
    content: ToolCompletedContent


class ToolFailedMessage(_MessageBase):
    type: Literal["tool.failed"]
    content: ToolFailedContent


class TerminalCompletedMessage(_MessageBase):
    type: Literal["terminal.completed"]
    content: TerminalCompletedContent


class TerminalFailedMessage(_MessageBase):
    type: Literal["terminal.failed"]
    content: TerminalFailedContent


class TerminalCancelledMessage(_MessageBase):
    type: Literal["terminal.cancelled"]
    content: TerminalCancelledContent


class RunRetryingMessage(_MessageBase):
    type: Literal["run.retrying"]
    content: RunRetryingContent


class RunQueuedMessage(_MessageBase):
    type: Literal["run.queued"]
    content: RunQueuedContent


class RunSteeredMessage(_MessageBase):
    type: Literal["run.steered"]
    content: RunSteeredContent


class NoticeMessage(_MessageBase):
    type: Literal["notice"]
    content: NoticeContent


class PermissionRequestedMessage(_MessageBase):
    type: Literal["permission.requested"]
    content: PermissionRequestedContent


class PermissionResolvedMessage(_MessageBase):
    type: Literal["permission.resolved"]
    content: PermissionResolvedContent


class CompactingMessage(_MessageBase):
    type: Literal["session.compacting"]
    content: CompactingContent


class CompactedMessage(_MessageBase):
    type: Literal["session.compacted"]
    content: CompactedContent


class RenamedMessage(_MessageBase):
    type: Literal["session.renamed"]
    content: RenamedContent


class PlanMessage(_MessageBase):
    type: Literal["plan"]
    content: PlanContent


PiMessage = Annotated[
    SessionStartedMessage
    | SessionResumedMessage
    | AssistantMessage
    | ThoughtMessage
    | ToolCallMessage
    | ToolUpdateMessage
    | ToolCompletedMessage
    | ToolFailedMessage
    | TerminalCompletedMessage
    | TerminalFailedMessage
    | TerminalCancelledMessage
    | RunRetryingMessage
    | RunQueuedMessage
    | RunSteeredMessage
    | NoticeMessage
    | PermissionRequestedMessage
    | PermissionResolvedMessage
    | CompactingMessage
    | CompactedMessage
    | RenamedMessage
    | PlanMessage,
    Field(discriminator="type"),
]


@functools.cache
def pi_message_adapter() -> TypeAdapter[PiMessage]:
    """Validator of outbound messages (tests and strict mode); built on first use."""
    return TypeAdapter(PiMessage)


# --------------------------------------------------------------------------- results


class RunResult(WireModel):
    """Result of a completed or failed `pi/run`."""

    run_id: str
    status: Literal["completed", "failed"]
    text: str
    stop_reason: str | None = None
    session_id: str | None = None
    usage: Usage | None = None
    attempts: int
    error: ErrorInfo | None = None


class CancelledRunData(WireModel):
    """`data` of the -32800 error that answers a cancelled `pi/run`."""

    run_id: str
    status: Literal["cancelled"]
    text: str
    shutdown: ShutdownReceipt | None
    session_id: str | None = None
    attempts: int = 1
    # What the user sent into the run that never reached the agent's model (its steers and
    # queued messages, then the prompts of runs queued behind it), for the editor's input;
    # absent when there were none.
    unsent: list[str] | None = None


class CancelResult(WireModel):
    """Result of `pi/cancel`."""

    run_id: str
    found: bool
    shutdown: ShutdownReceipt | None = None
    # As the cancelled run's data: the texts that never reached the model (absent: none).
    unsent: list[str] | None = None


class RunInfo(WireModel):
    """One live run in `pi/runs`."""

    run_id: str
    state: RunState
    attempt: int
    started_at: str
    session_id: str | None = None
    pid: int | None = None


class LiveConversation(WireModel):
    """One live conversation's pi in `pi/runs`."""

    session_id: str | None
    pid: int
    busy: bool
    cwd: str


class RunsResult(WireModel):
    """Result of `pi/runs`: live runs, the warm pool's idle agents and their memory, and the
    live conversations (their long-lived pi; the pre-spawned rpc pi counts as warm)."""

    runs: list[RunInfo]
    warm_pids: list[int] = Field(default_factory=list)
    warm_rss_bytes: int = 0
    live: list[LiveConversation] = Field(default_factory=list)


class SteerResult(WireModel):
    """Result of `pi/steer`."""

    run_id: str
    accepted: bool
    reason: str | None = None


class CloseSessionResult(WireModel):
    """Result of `pi/closeSession`: whether a live pi was stopped (the session file stays)."""

    session_id: str
    closed: bool


class SessionSummary(WireModel):
    """One session in `pi/sessions`."""

    session_id: str
    cwd: str
    title: str
    created_at: str
    updated_at: str
    message_count: int
    live: bool = False
    agent: str | None = None


class AgentInfo(WireModel):
    """One agent CLI the bridge can run: its command, whether it is found, its version."""

    name: str
    command: list[str]
    found: bool
    version: str | None = None
    #: How the bridge speaks to it ("acp", or the agent's own protocol, named after the agent);
    #: null for an agent only configured by command.
    protocol: str | None = None
    #: What it hands to the bridge instead of doing it itself: the bridge's file operations
    #: ("fs"), its commands ("terminal"), its approvals ("permissions").
    delegates: list[Literal["fs", "terminal", "permissions"]] = []


class SessionsResult(WireModel):
    """Result of `pi/sessions`: newest first."""

    sessions: list[SessionSummary]


class _HistoryEntry(WireModel):
    pass


class HistoryAssistant(_HistoryEntry):
    type: Literal["assistant"]
    content: AssistantContent


class HistoryThought(_HistoryEntry):
    type: Literal["assistant.thought"]
    content: ThoughtContent


class HistoryToolCall(_HistoryEntry):
    type: Literal["tool.call"]
    content: ToolCallContent


class HistoryToolCompleted(_HistoryEntry):
    type: Literal["tool.completed"]
    content: ToolCompletedContent


class HistoryToolFailed(_HistoryEntry):
    type: Literal["tool.failed"]
    content: ToolFailedContent


HistoryMessage = Annotated[
    HistoryAssistant | HistoryThought | HistoryToolCall | HistoryToolCompleted | HistoryToolFailed,
    Field(discriminator="type"),
]


class HistoryTurn(WireModel):
    """One prompt of a session and the messages that answered it, as a live run streamed them."""

    prompt: str
    messages: list[HistoryMessage]


class SessionHistory(WireModel):
    """Result of `pi/session` for a known session. `omittedTurns`: older turns left out (bound)."""

    found: Literal[True] = True
    session_id: str
    cwd: str
    title: str
    turns: list[HistoryTurn]
    omitted_turns: int | None = None
    agent: str | None = None


class SessionNotFound(WireModel):
    """Result of `pi/session` for an unknown session id."""

    found: Literal[False] = False
    session_id: str


class EffectiveSettings(WireModel):
    """The server-wide settings in force after initialize (initializationOptions round-trip)."""

    pi_command: list[str]
    retry: RetryPolicy
    max_concurrent_runs: int
    queue_when_busy: bool
    silence_timeout_ms: int | None
    warm_pool: bool
    warm_pool_ttl_ms: int
    engine: Engine = "rpc"
    max_live_sessions: int = 4
    session_idle_ms: int = 600_000


class McpSupport(WireModel):
    """Which MCP server transports the bridge hands its agents (ACP's mcpCapabilities, plus stdio)."""

    stdio: bool = True
    http: bool = True
    sse: bool = False


class ServerCapabilities(WireModel):
    """`capabilities.experimental.piBridge` of the initialize answer."""

    protocol_version: int = PROTOCOL_VERSION
    methods: list[str] = Field(
        default_factory=lambda: [
            RUN,
            CANCEL,
            RUNS,
            SESSIONS,
            SESSION,
            STEER,
            CLOSE_SESSION,
            PERMISSIONS,
            SET_PERMISSIONS,
            SET_MODE,
            COMMANDS,
            RENAME_SESSION,
            DELETE_SESSION,
            CHECKPOINTS,
            REWIND,
            CHECKPOINT_FILE,
            MODELS,
        ]
    )
    notifications: list[str] = Field(default_factory=lambda: [MESSAGE])
    message_types: list[str] = Field(default_factory=lambda: list(get_args(MessageType)))
    settings: EffectiveSettings | None = None
    agents: list[AgentInfo] | None = None
    default_agent: str | None = None
    checkpoints: CheckpointsCapability | None = None
    # The MCP transports a run's `mcpServers` may use.
    mcp: McpSupport = Field(default_factory=McpSupport)
    sandbox: SandboxAvailability | None = None


# --------------------------------------------------------------------------- permissions

PERMISSIONS = "pi/permissions"
SET_PERMISSIONS = "pi/setPermissions"
SET_MODE = "pi/setMode"

ToolKind = Literal["read", "edit", "execute", "other"]
RuleDecision = Literal["allow", "deny"]
RuleScope = Literal["session", "workspace"]
MAX_RULES: Final = 1000
MAX_PREFIX_WORDS: Final = 64
MAX_RULE_TEXT: Final = 4096


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


class RuleMatch(WireModel):
    """What a rule matches: exactly one of a shell command's words (`command`: that command and no
    other), its leading words (`commandPrefix`: shown `X *`) or a path glob.

    A rule is as wide as its label: an "Always allow `X`" option's rule is `command`; a prefix
    rule comes only from an option whose label ends ` *`.
    """

    model_config = ConfigDict(strict=True)

    command_prefix: list[Annotated[str, Field(min_length=1, max_length=MAX_RULE_TEXT)]] | None = Field(
        None, min_length=1, max_length=MAX_PREFIX_WORDS
    )
    command: list[Annotated[str, Field(min_length=1, max_length=MAX_RULE_TEXT)]] | None = Field(
        None, min_length=1, max_length=MAX_PREFIX_WORDS
    )
    path: str | None = Field(None, min_length=1, max_length=MAX_RULE_TEXT)

    @field_validator("command_prefix", "command")
    @classmethod
    def _words_have_no_nul(cls, value: list[str] | None) -> list[str] | None:
        for word in value or ():
            _no_nul(word)
        return value

    @field_validator("path")
    @classmethod
    def _path_has_no_nul(cls, value: str | None) -> str | None:
        return None if value is None else _no_nul(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> RuleMatch:
        given = [value for value in (self.command_prefix, self.command, self.path) if value is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of command, commandPrefix or path")
        return self


class PermissionRule(WireModel):
    """An allow or deny rule for one tool (`*`: any tool); session rules name their conversation."""

    model_config = ConfigDict(strict=True)

    id: str = Field(pattern=RUN_ID_PATTERN)
    tool: str = Field(min_length=1, max_length=64)
    match: RuleMatch
    decision: RuleDecision
    scope: RuleScope
    session_id: str | None = Field(None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _session_rules_name_their_session(self) -> PermissionRule:
        if self.scope == "session" and self.session_id is None:
            raise ValueError("a session rule needs its sessionId")
        if self.scope == "workspace" and self.session_id is not None:
            raise ValueError("a workspace rule has no sessionId")
        return self


def _absolute(cwd: str) -> str:
    if not cwd.startswith("/"):
        raise ValueError("must be an absolute path")
    return _no_nul(cwd)


def _unique_ids(rules: list[PermissionRule]) -> list[PermissionRule]:
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise ValueError(f"rule id {rule.id!r} is given twice")
        seen.add(rule.id)
    return rules


class PermissionsParams(WireModel):
    """Params of `pi/permissions`: the rules in force for the workspace `cwd`."""

    model_config = ConfigDict(strict=True)

    cwd: str = Field(min_length=1, max_length=MAX_RULE_TEXT)

    _cwd_is_absolute = field_validator("cwd")(_absolute)


class SetPermissionsParams(WireModel):
    """Params of `pi/setPermissions`: replace every rule of the workspace `cwd`."""

    model_config = ConfigDict(strict=True)

    cwd: str = Field(min_length=1, max_length=MAX_RULE_TEXT)
    rules: list[PermissionRule] = Field(max_length=MAX_RULES)

    _cwd_is_absolute = field_validator("cwd")(_absolute)

    @field_validator("rules")
    @classmethod
    def _ids_are_unique(cls, rules: list[PermissionRule]) -> list[PermissionRule]:
        return _unique_ids(rules)


class PermissionsResult(WireModel):
    """Result of `pi/permissions` and `pi/setPermissions`: the rules now in force for `cwd`."""

    cwd: str
    rules: list[PermissionRule]


class SetModeParams(WireModel):
    """Params of `pi/setMode`: the conversation's mode, in force from its next tool call."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)
    mode: PermissionMode


class SetModeResult(WireModel):
    """Result of `pi/setMode`: the conversation and the mode now in force."""

    session_id: str
    mode: PermissionMode


REQUEST_PERMISSION = "pi/requestPermission"
MAX_REJECT_MESSAGE: Final = 4096


class ProposedDiff(WireModel):
    """The change an edit or write would make (`oldText` None: the file does not exist yet)."""

    path: str
    old_text: str | None = None
    new_text: str | None = None


class RequestPermissionParams(WireModel):
    """Params of the server -> client request `pi/requestPermission`."""

    run_id: str
    session_id: str | None = None
    tool_call_id: str
    tool: str
    kind: ToolKind
    title: str
    input: dict[str, Any]
    diff: ProposedDiff | None = None
    options: list[PermissionOption]
    #: The whole command, as it would run (the title may be cut; this never is).
    command: str | None = None
    #: The whole path the call names, as the agent gave it.
    path: str | None = None


class RequestPermissionAnswer(WireModel):
    """The client's answer to `pi/requestPermission`: an option (a reject's `message` goes to the
    model), or `outcome: "cancelled"`."""

    option_id: str | None = Field(None, min_length=1, max_length=256)
    message: str | None = Field(None, max_length=MAX_REJECT_MESSAGE)
    outcome: Literal["cancelled"] | None = None


ASK = "pi/ask"
MAX_ASK_VALUE: Final = 64 * 1024
DialogKind = Literal["select", "confirm", "input", "editor"]


class AskParams(WireModel):
    """Params of the server -> client request `pi/ask`: one of the agent's own dialogs."""

    run_id: str
    session_id: str | None = None
    kind: DialogKind
    title: str
    message: str | None = None
    options: list[str] | None = None
    placeholder: str | None = None
    prefill: str | None = None
    timeout_ms: int | None = None


class AskAnswer(WireModel):
    """The client's answer to `pi/ask`: `value` (select, input, editor), `confirmed` (confirm), or
    `cancelled: true`."""

    value: str | None = Field(None, max_length=MAX_ASK_VALUE)
    confirmed: bool | None = None
    cancelled: bool | None = None


class ClientPiBridgeCapabilities(WireModel):
    """`capabilities.experimental.piBridge` of the client's initialize: what it can answer."""

    permissions: bool = False
    questions: bool = False


# --------------------------------------------------------------------------- the conversation toolbox

COMMANDS = "pi/commands"
MODELS = "pi/models"
RENAME_SESSION = "pi/renameSession"
DELETE_SESSION = "pi/deleteSession"
MAX_TITLE = 200
CommandSource = Literal["extension", "prompt", "skill", "bridge", "agent"]


class CommandsParams(WireModel):
    """Params of `pi/commands`: the commands of a conversation, or of a workspace's new one."""

    model_config = ConfigDict(strict=True)

    session_id: str | None = Field(None, min_length=1, max_length=256)
    cwd: str | None = Field(None, min_length=1)


class CommandInfo(WireModel):
    """One `/` command: its name without the slash, what it does, where it comes from."""

    name: str
    description: str
    source: CommandSource
    argument_hint: str | None = None


class CommandsResult(WireModel):
    """Result of `pi/commands`; `sessionId` is the conversation that answered (a new one was
    opened when none was named: the client may send its next prompt there)."""

    commands: list[CommandInfo]
    session_id: str | None = None


class ModelsParams(WireModel):
    """Params of `pi/models`: the models the conversation's agent can run (a new conversation in
    `cwd`, default the workspace, when none is named)."""

    model_config = ConfigDict(strict=True)

    session_id: str | None = Field(None, min_length=1, max_length=256)
    cwd: str | None = Field(None, min_length=1)


class ModelInfo(WireModel):
    """One model the agent can run: its provider and id (a run's `provider` and `model`), its
    display name, and whether it is the one the conversation runs now."""

    provider: str
    id: str
    name: str | None = None
    current: bool = False


class ModelsResult(WireModel):
    """Result of `pi/models`: the agent's own list; `current` is the model the conversation runs
    now (absent unless it is one of the listed); `sessionId` is the conversation that answered."""

    models: list[ModelInfo]
    current: ModelInfo | None = None
    session_id: str | None = None


class RenameSessionParams(WireModel):
    """Params of `pi/renameSession`."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)
    title: str = Field(min_length=1, max_length=MAX_TITLE)


class RenameSessionResult(WireModel):
    """Result of `pi/renameSession`: the title the agent stored."""

    session_id: str
    title: str


class DeleteSessionParams(WireModel):
    """Params of `pi/deleteSession`."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)


class DeleteSessionResult(WireModel):
    """Result of `pi/deleteSession`: whether a stored session was deleted."""

    deleted: bool


# --------------------------------------------------------------------------- checkpoints and rewind

CHECKPOINTS = "pi/checkpoints"
REWIND = "pi/rewind"
CHECKPOINT_FILE = "pi/checkpointFile"
RestoreWhat = Literal["files", "conversation", "both"]


class CheckpointsParams(WireModel):
    """Params of `pi/checkpoints`."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)


class CheckpointInfo(WireModel):
    """One checkpoint: the workspace before a prompt, and the files that prompt's turn changed."""

    checkpoint_id: str
    #: The prompt, to name the checkpoint by: cut to its first 65,536 characters.
    prompt: str
    created_at: str
    run_id: str | None = None
    files: list[str]
    notes: list[str] = Field(default_factory=list)


class CheckpointsResult(WireModel):
    """Result of `pi/checkpoints`: oldest first; `available` false (with why) where they are off."""

    available: bool
    reason: str | None = None
    checkpoints: list[CheckpointInfo]


class RewindParams(WireModel):
    """Params of `pi/rewind`."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)
    checkpoint_id: str = Field(min_length=1, max_length=256)
    restore: RestoreWhat
    dry_run: bool = False
    force: bool = False


class RewindResult(WireModel):
    """Result of `pi/rewind`: the files put back, the user's own changes left alone, and the
    conversation's session from now on (a new one after a conversation rewind)."""

    restored: list[str]
    conflicts: list[str]
    session_id: str
    dry_run: bool


class CheckpointFileParams(WireModel):
    """Params of `pi/checkpointFile`: one file as it was at a checkpoint (a preview's old side)."""

    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, max_length=256)
    checkpoint_id: str = Field(min_length=1, max_length=256)
    path: str = Field(min_length=1, max_length=4096)


class CheckpointFileResult(WireModel):
    """Result of `pi/checkpointFile`: its text (null: the file did not exist), or `binary`."""

    path: str
    content: str | None
    binary: bool = False


class CheckpointsCapability(WireModel):
    """`capabilities.experimental.piBridge.checkpoints` of the initialize answer."""

    available: bool
    reason: str | None = None


SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "RunParams": RunParams,
    "CancelParams": CancelParams,
    "SteerParams": SteerParams,
    "CloseSessionParams": CloseSessionParams,
    "InitializationOptions": InitializationOptions,
    "RunResult": RunResult,
    "CancelledRunData": CancelledRunData,
    "CancelResult": CancelResult,
    "RunsResult": RunsResult,
    "SteerResult": SteerResult,
    "CloseSessionResult": CloseSessionResult,
    "SessionsParams": SessionsParams,
    "SessionParams": SessionParams,
    "SessionsResult": SessionsResult,
    "SessionHistory": SessionHistory,
    "SessionNotFound": SessionNotFound,
    "ServerCapabilities": ServerCapabilities,
    "PermissionsParams": PermissionsParams,
    "SetPermissionsParams": SetPermissionsParams,
    "PermissionsResult": PermissionsResult,
    "SetModeParams": SetModeParams,
    "SetModeResult": SetModeResult,
    "RequestPermissionParams": RequestPermissionParams,
    "RequestPermissionAnswer": RequestPermissionAnswer,
    "ClientPiBridgeCapabilities": ClientPiBridgeCapabilities,
    "AskParams": AskParams,
    "AskAnswer": AskAnswer,
    "CommandsParams": CommandsParams,
    "CommandsResult": CommandsResult,
    "ModelsParams": ModelsParams,
    "ModelsResult": ModelsResult,
    "RenameSessionParams": RenameSessionParams,
    "RenameSessionResult": RenameSessionResult,
    "DeleteSessionParams": DeleteSessionParams,
    "DeleteSessionResult": DeleteSessionResult,
    "CheckpointsParams": CheckpointsParams,
    "CheckpointsResult": CheckpointsResult,
    "RewindParams": RewindParams,
    "RewindResult": RewindResult,
    "CheckpointFileParams": CheckpointFileParams,
    "CheckpointFileResult": CheckpointFileResult,
}


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the whole contract (wire names), deterministic for committing."""
    defs: dict[str, Any] = {}
    for name, model in SCHEMA_MODELS.items():
        schema = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[name] = schema
    message_schema = pi_message_adapter().json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs.update(message_schema.pop("$defs", {}))
    defs["PiMessage"] = message_schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pi-bridge wire contract",
        "description": f"protocolVersion {PROTOCOL_VERSION}; methods {RUN}, {CANCEL}, {RUNS}, "
        f"{SESSIONS}, {SESSION}, {STEER}, {CLOSE_SESSION}, {PERMISSIONS}, {SET_PERMISSIONS}, {SET_MODE}, "
        f"{COMMANDS}, {RENAME_SESSION}, {DELETE_SESSION}, {CHECKPOINTS}, {REWIND}, {CHECKPOINT_FILE}, "
        f"{MODELS}; "
        f"notification {MESSAGE}; server -> client requests {REQUEST_PERMISSION}, {ASK}",
        "$defs": dict(sorted(defs.items())),
    }


def main() -> None:
    """Print the contract's JSON Schema (the committed docs/protocol.schema.json)."""
    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
