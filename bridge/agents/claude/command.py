"""Turn run options into Claude Code's command line, environment and stdin: the one place its flags live."""

from __future__ import annotations

from typing import Final, Literal, get_args

from bridge.agents.claude.trust import trust_flags
from bridge.agents.values import LaunchSpec, RunOptions

PermissionMode = Literal["acceptEdits", "bypassPermissions", "default", "plan"]
PERMISSION_MODES: Final = frozenset(get_args(PermissionMode))
DEFAULT_PERMISSION_MODE: Final[PermissionMode] = "acceptEdits"

BASE_FLAGS: Final = ("-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages")

# One attempt is one attempt: Claude Code's own hidden retries (with a growing backoff) are
# off, retry is the bridge's, visible, and the caller's choice. No telemetry,
# updater or error reporting: the bridge must stay loopback-only with a local endpoint.
BASE_ENV: Final = {"CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

#: A run's thinking level -> Claude Code's `--effort` (2.1.197 takes low, medium, high, xhigh,
#: max); `off` gives no flag, so the model's own default holds.
EFFORTS: Final = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}


#: With MCP servers, the first turn waits until they connected (bounded by Claude Code's own
#: MCP_TIMEOUT): a live Claude Code otherwise starts it with them still pending, their tools
#: not offered.
MCP_ENV: Final = {"MCP_CONNECTION_NONBLOCKING": "0"}


def claude_env(options: RunOptions) -> dict[str, str]:
    """The environment Claude Code gets on top of the bridge's (see BASE_ENV and MCP_ENV)."""
    return {**BASE_ENV, **(MCP_ENV if options.mcp_config else {})}


def model_and_tool_flags(options: RunOptions, allowed_tools: tuple[str, ...]) -> list[str]:
    """The model and its effort, the built-in tools the run may use, the tools allowed on top,
    and the conversation's MCP servers."""
    flags = ["--model", options.model] if options.model else []
    effort = EFFORTS.get(options.thinking or "")
    if effort:
        flags += ["--effort", effort]
    if options.tools is not None:
        flags += ["--tools", ",".join(options.tools)]
    if allowed_tools:
        flags += ["--allowedTools", ",".join(allowed_tools)]
    if options.mcp_config:
        # The file is in the form Claude Code reads (a path: the servers' secrets stay in it).
        # Its tools are `mcp__<server>__<tool>` and go through the same permission checks; the
        # user's own MCP configuration still applies, as pi's does (no --strict-mcp-config).
        flags += ["--mcp-config", options.mcp_config]
    return flags


def claude_flags(
    options: RunOptions, permission_mode: PermissionMode, allowed_tools: tuple[str, ...] = ()
) -> list[str]:
    """Claude Code's flags for the options of one run, in a stable order.

    `provider` has no Claude Code flag: the endpoint comes from the environment
    (ANTHROPIC_BASE_URL). `thinking` is `--effort` (EFFORTS). `tools` restricts the built-in tools.
    A session the bridge named before Claude Code stored it starts with `--session-id` (which
    fails, "already in use", once the session exists); every stored one is `--resume`d.
    """
    flags = [
        *BASE_FLAGS,
        "--permission-mode",
        permission_mode,
        *trust_flags(options.trusted, options.cwd),
        *model_and_tool_flags(options, allowed_tools),
    ]
    if options.session_id and options.new_session and not options.resumed:
        flags += ["--session-id", options.session_id]
    elif options.session_id:
        flags += ["--resume", options.session_id]
    elif options.continue_session:
        flags += ["--continue"]
    return flags


def launch_spec(
    command: tuple[str, ...],
    options: RunOptions,
    permission_mode: PermissionMode = DEFAULT_PERMISSION_MODE,
    allowed_tools: tuple[str, ...] = (),
) -> LaunchSpec:
    """The full launch of one Claude Code attempt: argv, cwd, extra environment, prompt as stdin."""
    return LaunchSpec(
        argv=(*command, *claude_flags(options, permission_mode, allowed_tools)),
        cwd=options.cwd,
        env=claude_env(options),
        stdin=options.prompt.encode("utf-8"),
    )
