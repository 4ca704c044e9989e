"""The ACP agents the bridge knows, as data: how to start each and how to point it at a model."""

from __future__ import annotations

import json
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


CATALOG: Final[dict[str, AcpAgentSpec]] = {
    "pi-acp": AcpAgentSpec(
        name="pi-acp",
        display_name="pi (pi-acp)",
        command=("pi-acp",),
        package="pi-acp@0.0.34",
        # pi-acp asks npm for pi's latest version at each session/new: offline, npm answers at once
        env={"NPM_CONFIG_OFFLINE": "true"},
        model_format="provider/model",
        provider="fake",
        model_server_env=_pi_model_server,
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
        model_server_env=_claude_model_server,
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
    ),
}


def model_value(spec: AcpAgentSpec, provider: str, model: str) -> str:
    """The agent's id of a model (`session/set_config_option`'s value)."""
    if spec.model_format == "provider/model" and "/" not in model:
        return f"{provider}/{model}"
    return model
