"""Server settings: which agent command to run, and initializationOptions read leniently."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from bridge.contract import (
    AgentSetting,
    InitializationOptions,
    McpServerHttp,
    McpServerStdio,
    PermissionMode,
    RetryPolicy,
    SandboxSettings,
)

log = logging.getLogger(__name__)

COMMAND_ENV = "PI_BRIDGE_PI_COMMAND"
# Set in the agents' environment when the client turns the plan tool on (`planTool`).
PLAN_TOOL_ENV = "PI_BRIDGE_PLAN_TOOL"


def env_number(name: str, default: float) -> float:
    """A number the bridge's environment may set (a timeout, a limit), read when it is used.

    Never at import: a module's constant would keep the environment of whatever imported it
    first (a test's fork server, a parent that set it later). A value that is not a number is
    ignored, with a warning naming it.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        log.warning("%s=%r is not a number: %g is used", name, raw, default)
        return default


@dataclasses.dataclass(frozen=True, slots=True)
class BridgeConfig:
    """Server-wide settings, from the command line and initializationOptions."""

    command: tuple[str, ...] = ("pi",)
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    max_concurrent_runs: int = 8
    queue_when_busy: bool = True
    silence_seconds: float | None = None
    default_provider: str | None = None
    default_model: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    warm_pool: bool = True
    warm_pool_ttl_seconds: float = 300.0
    engine: Literal["rpc", "json"] = "rpc"
    max_live_sessions: int = 4
    session_idle_seconds: float = 600.0
    # Agent name -> command; the server's own adapter runs `command` unless named here.
    agents: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Agent name -> how the bridge speaks to it, and its own environment (the object form).
    agent_protocols: dict[str, str] = dataclasses.field(default_factory=dict)
    agent_envs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    default_agent: str | None = None
    permission_mode: str | None = None
    allowed_tools: tuple[str, ...] = ()
    # Every conversation's permission mode until changed (None: the contract's default).
    default_mode: PermissionMode | None = None
    # A checkpoint of the workspace before every prompt.
    checkpoints: bool = True
    # The MCP servers of a run or ACP session that names none (initializationOptions.mcpServers).
    mcp_servers: tuple[McpServerStdio | McpServerHttp, ...] = ()
    # How every run's tool commands are confined unless the run says otherwise (None: not at all).
    sandbox: SandboxSettings | None = None
    # The agent is offered the bridge's plan tool where it has none of its own (pi's `todo`).
    plan_tool: bool = False

    def env_of(self, agent: str) -> dict[str, str]:
        """The environment agent `agent` runs in: the client's, under its own (object form)."""
        own = self.agent_envs.get(agent)
        return {**self.env, **own} if own else self.env


def command_from(flag: str | None, environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The agent command from --pi-command, else PI_BRIDGE_PI_COMMAND, else `pi` (split, no shell)."""
    env = os.environ if environ is None else environ
    for source in (flag, env.get(COMMAND_ENV)):
        if source and source.strip():
            return tuple(shlex.split(source))
    return ("pi",)


def _lenient_options(raw: dict[str, Any]) -> tuple[InitializationOptions, list[str]]:
    warnings: list[str] = []
    try:
        return InitializationOptions.model_validate(raw), warnings
    except ValidationError as exc:
        bad: set[str] = set()
        bad_agents: set[str] = set()
        for error in exc.errors():
            loc = list(error["loc"])
            if len(loc) > 1 and loc[0] == "agents":
                bad_agents.add(str(loc[1]))  # that agent alone falls back to its default
                del loc[2:3]  # the form's tag (command or setting) is no field of the wire
            elif loc:
                bad.add(str(loc[0]))
            field = ".".join(str(part) for part in loc)
            warnings.append(f"initializationOptions.{field}: {error['msg']}; using the default")
        kept = {key: value for key, value in raw.items() if key not in bad}
        if bad_agents and isinstance(kept.get("agents"), dict):
            kept["agents"] = {name: v for name, v in kept["agents"].items() if name not in bad_agents}
        try:
            return InitializationOptions.model_validate(kept), warnings
        except ValidationError:
            return InitializationOptions.model_validate({}), warnings


def _agent_changes(
    base: BridgeConfig, entries: Mapping[str, list[str] | AgentSetting], warnings: list[str]
) -> dict[str, Any]:
    """The agents' commands, protocols and environments, from either form of each entry."""
    agents, protocols, envs = dict(base.agents), dict(base.agent_protocols), dict(base.agent_envs)
    for name, entry in entries.items():
        argv = entry.command if isinstance(entry, AgentSetting) else entry
        if not argv or not all(argv):
            warnings.append(f"initializationOptions.agents.{name}: an empty command; using the default")
            continue
        agents[name] = tuple(argv)
        if isinstance(entry, AgentSetting):
            if entry.protocol is not None:
                protocols[name] = entry.protocol
            if entry.env:
                envs[name] = dict(entry.env)
    return {"agents": agents, "agent_protocols": protocols, "agent_envs": envs}


def _optional_changes(
    base: BridgeConfig, options: InitializationOptions, warnings: list[str]
) -> dict[str, Any]:
    """The settings the client gave that have no default of their own (absent: the base's)."""
    changes: dict[str, Any] = {}
    if options.pi_command:
        changes["command"] = tuple(options.pi_command)
    if options.retry is not None:
        changes["retry"] = options.retry
    if options.silence_timeout_ms is not None:
        changes["silence_seconds"] = options.silence_timeout_ms / 1000
    if options.env:
        changes["env"] = {**base.env, **options.env}
    if options.agents:
        changes.update(_agent_changes(base, options.agents, warnings))
    if options.default_agent:
        changes["default_agent"] = options.default_agent
    if options.mcp_servers is not None:
        changes["mcp_servers"] = tuple(options.mcp_servers)
    changes.update(_permission_changes(options))
    return changes


def _permission_changes(options: InitializationOptions) -> dict[str, Any]:
    """The permission settings the client gave: the agents' own and the conversations' mode."""
    changes: dict[str, Any] = {}
    if options.permission_mode:
        changes["permission_mode"] = options.permission_mode
    if options.allowed_tools is not None:
        changes["allowed_tools"] = tuple(options.allowed_tools)
    if options.default_mode is not None:
        changes["default_mode"] = options.default_mode
    if options.sandbox is not None:
        changes["sandbox"] = options.sandbox
    return changes


def resolve_config(base: BridgeConfig, raw: Any) -> tuple[BridgeConfig, list[str]]:
    """Merge initializationOptions into the server's base config; return it with warnings."""
    if raw is None:
        return base, []
    if not isinstance(raw, dict):
        return base, ["initializationOptions must be an object; using the defaults"]
    options, warnings = _lenient_options(raw)
    changes: dict[str, Any] = {
        "max_concurrent_runs": options.max_concurrent_runs,
        "queue_when_busy": options.queue_when_busy,
        "warm_pool": options.warm_pool,
        "checkpoints": options.checkpoints,
        "warm_pool_ttl_seconds": options.warm_pool_ttl_ms / 1000,
        "engine": options.engine,
        "max_live_sessions": options.max_live_sessions,
        "session_idle_seconds": options.session_idle_ms / 1000,
    }
    changes.update(_optional_changes(base, options, warnings))
    if options.plan_tool:
        # The bridge's own variable, in every agent's environment: pi's extension reads it.
        changes["plan_tool"] = True
        changes["env"] = {**changes.get("env", base.env), PLAN_TOOL_ENV: "1"}
    return dataclasses.replace(base, **changes), warnings
