"""The ACP agents the bridge knows, as data: how to start each and how to point it at a model."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

#: The environment variable of a launch saying which session the process opens:
#: "new", "new:<bridge id>" (a conversation the bridge named) or "load:<agent id>|<bridge id>".
SESSION_ENV: Final = "PI_BRIDGE_ACP_SESSION"
#: The environment variable of a launch naming the private file of the conversation's MCP servers
#: (a path: their secrets stay in the file; the client hands them to session/new).
MCP_ENV: Final = "PI_BRIDGE_ACP_MCP"
#: The line the client hands the attempt when the prompt's answer came (the engine's "settled").
SETTLED_LINE: Final = b'{"type":"settled"}'

#: How an agent writes a model id in `session/set_config_option` ("model"): pi-acp takes
#: "provider/model", the Claude adapter the model alone.
ModelFormat = Literal["provider/model", "model"]
#: Points an agent at the model server at `base_url` (state in `workdir`); the environment it needs.
ModelServerEnv = Callable[[str, Path, str], dict[str, str]]
#: The dirs an agent writes its own state to, for its launch environment (a sandbox keeps them
#: writable; a file among them is bound only when it exists).
OwnDirs = Callable[[Mapping[str, str]], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class AcpAgentSpec:
    """One ACP agent: its name, how to run it, and what it needs to run offline."""

    name: str
    display_name: str
    command: tuple[str, ...]
    #: The npm package that provides it (the doctor and the docs name it; setup.sh pins it).
    package: str
    #: Always in its environment (kept small: no network the bridge does not need).
    env: Mapping[str, str] = field(default_factory=dict)
    model_format: ModelFormat = "model"
    #: The environment variable naming the model at launch, for an agent whose session's model
    #: list is fixed (the Claude adapter validates `set_config_option` against its own list): the
    #: conversation's process starts on the run's model. None: set by `session/set_config_option`.
    model_env: str | None = None
    #: The provider its models are of, when it does not say (the seam's `ModelChoice.provider`).
    provider: str = "acp"
    #: `_meta` of every session/new and session/load.
    session_meta: Mapping[str, Any] = field(default_factory=dict)
    model_server_env: ModelServerEnv | None = None
    #: Offered `fs/read_text_file` and `fs/write_text_file` (the bridge's file operations do them).
    client_fs: bool = False
    #: It sends a start-up note as a message chunk just after it answers session/new (pi-acp's
    #: version banner, on a timer): a prompt sent before it comes would take it in as its text.
    startup_chunk: bool = False
    #: Its session modes that stop it asking (it would decide approvals in the bridge's place):
    #: not offered to a client, so the bridge's permission modes stay the ones that decide.
    unoffered_modes: frozenset[str] = frozenset()
    #: Where it keeps its own state: a sandbox confines its whole process with these writable
    #: (None: unknown, so no sandbox can hold it).
    own_dirs: OwnDirs | None = None
    #: The variables its model needs (fnmatch patterns): a sandbox drops every other credential.
    model_vars: tuple[str, ...] = ()


def _pi_model_server(base_url: str, workdir: Path, provider: str) -> dict[str, str]:
    """pi under pi-acp reads its models from its agent dir, as pi itself does."""
    from bridge.scripted_model import write_pi_agent_dir

    agent_dir = workdir / "pi-agent"
    write_pi_agent_dir(agent_dir, base_url, provider=provider)
    return {"PI_CODING_AGENT_DIR": str(agent_dir)}


def _claude_model_server(base_url: str, workdir: Path, provider: str) -> dict[str, str]:
    """The Claude adapter's Claude Code against an Anthropic-compatible server, asking before
    changes (`defaultMode: default`: its own default, "auto", decides alone)."""
    config = workdir / "claude-acp-config"
    config.mkdir(parents=True, exist_ok=True)
    settings = {"permissions": {"defaultMode": "default"}}
    (config / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return {
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model",
        "CLAUDE_CONFIG_DIR": str(config),
    }


def _opencode_model_server(base_url: str, workdir: Path, provider: str) -> dict[str, str]:
    """OpenCode with an OpenAI-compatible provider at the scripted model, in a home of its own."""
    from bridge.scripted_model.agent_configs import opencode_env

    return opencode_env(workdir / "opencode-home", base_url.removesuffix("/v1"))


def _gemini_model_server(base_url: str, workdir: Path, provider: str) -> dict[str, str]:
    """Gemini CLI against the scripted model's `streamGenerateContent`, in a home of its own."""
    from bridge.scripted_model.agent_configs import gemini_env

    return gemini_env(workdir / "gemini-home", base_url.removesuffix("/v1"))


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def _xdg(env: Mapping[str, str], name: str, default: str) -> str:
    return env.get(name) or os.path.join(_home(env), default)


def _pi_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """pi's agent dir (its sessions, settings, auth) and pi-acp's session map."""
    agent_dir = env.get("PI_CODING_AGENT_DIR") or os.path.join(_home(env), ".pi", "agent")
    return agent_dir, os.path.join(_home(env), ".pi", "pi-acp")


def _claude_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """Claude Code's config dir (or ~/.claude and ~/.claude.json) and its cache of logs."""
    cache = os.path.join(_xdg(env, "XDG_CACHE_HOME", ".cache"), "claude-cli-nodejs")
    if env.get("CLAUDE_CONFIG_DIR"):
        return env["CLAUDE_CONFIG_DIR"], cache
    return os.path.join(_home(env), ".claude"), os.path.join(_home(env), ".claude.json"), cache


def _opencode_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """OpenCode's folder in each XDG dir (its database, its provider packages, its logs)."""
    homes = (
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_STATE_HOME", ".local/state"),
    )
    return tuple(os.path.join(_xdg(env, name, default), "opencode") for name, default in homes)


def _gemini_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """~/.gemini: its settings, chats and logs."""
    return (os.path.join(_home(env), ".gemini"),)


CATALOG: Final[dict[str, AcpAgentSpec]] = {
    "pi-acp": AcpAgentSpec(
        name="pi-acp",
        display_name="pi (pi-acp)",
        command=("pi-acp",),
        package="pi-acp@0.0.34",
        startup_chunk=True,
        # pi-acp asks npm for pi's latest version at each session/new: offline, npm answers at once
        env={"NPM_CONFIG_OFFLINE": "true"},
        model_format="provider/model",
        provider="fake",
        model_server_env=_pi_model_server,
        own_dirs=_pi_dirs,
        # pi's providers each read their key from a variable of their own
        model_vars=("PI_CODING_AGENT_DIR", "*_API_KEY", "*_BASE_URL"),
    ),
    "claude-acp": AcpAgentSpec(
        name="claude-acp",
        display_name="Claude Code (claude-agent-acp)",
        command=("claude-agent-acp",),
        package="@agentclientprotocol/claude-agent-acp@0.101.0",
        # Its Claude Code refuses to start as root unless told it is sandboxed (CI runs as root),
        # even with bypass off; it never bypasses here: the session's _meta turns that off.
        env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"},
        model_format="model",
        model_env="ANTHROPIC_MODEL",
        provider="anthropic",
        session_meta={"claudeCode": {"options": {"allowDangerouslySkipPermissions": False}}},
        unoffered_modes=frozenset({"acceptEdits", "auto", "bypassPermissions", "dontAsk"}),
        model_server_env=_claude_model_server,
        own_dirs=_claude_dirs,
        model_vars=("ANTHROPIC_*", "CLAUDE_*"),
    ),
    "opencode": AcpAgentSpec(
        name="opencode",
        display_name="OpenCode",
        command=("opencode", "acp"),
        package="opencode-ai@1.18.33",
        # no start-up fetch of models.dev, no update, no sharing
        env={
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        },
        model_format="provider/model",
        provider="scripted",
        model_server_env=_opencode_model_server,
        own_dirs=_opencode_dirs,
        # its config (the provider and its key) and where its XDG dirs are; its package registry
        model_vars=("OPENCODE_*", "XDG_*_HOME", "NPM_CONFIG_REGISTRY", "BUN_CONFIG_REGISTRY"),
    ),
    "gemini": AcpAgentSpec(
        name="gemini",
        display_name="Gemini CLI",
        command=("gemini", "--acp"),
        package="@google/gemini-cli@0.61.0",
        # its session offers no model option: the conversation's process starts on the run's model
        # (its `session/set_model` left 0.61.0 asking the server for model "None")
        model_env="GEMINI_MODEL",
        provider="google",
        model_server_env=_gemini_model_server,
        client_fs=True,
        unoffered_modes=frozenset({"autoEdit", "yolo"}),
        own_dirs=_gemini_dirs,
        model_vars=("GEMINI_*", "GOOGLE_GEMINI_*"),
    ),
}


def model_value(spec: AcpAgentSpec, provider: str, model: str) -> str:
    """The agent's id of a model (`session/set_config_option`'s value)."""
    if spec.model_format == "provider/model" and "/" not in model:
        return f"{provider}/{model}"
    return model
