"""pi's part of `pi-bridge doctor`:"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bridge.agents.checks import Check, last_line, run_probe, which
from bridge.agents.pi.session_paths import AGENT_DIR_ENV, agent_dir

# The npm package that ships the `pi` command (renamed from @mariozechner/pi-coding-agent).
PI_NPM_PACKAGE = "@earendil-works/pi-coding-agent"
PI_INSTALL_COMMAND = f"npm install -g {PI_NPM_PACKAGE}"
PI_DOCS_URL = f"https://www.npmjs.com/package/{PI_NPM_PACKAGE}"

# The oldest pi the bridge is tested against in CI (`--mode json` and `--mode rpc`).
PI_MIN_VERSION = (1, 6, 0)
# pi 1.6's package.json: "engines": {"node": ">=22.19.0"}; older Node fails at start-up.
NODE_MIN_VERSION = (22, 19, 0)
NODE_INSTALL_HINT = "install Node >= 22.19 (https://nodejs.org/, or `npm install -g node@22`)"

# The files that make up pi's model configuration (copied, never written, by the doctor).
MODEL_CONFIG_FILES = ("models.json", "settings.json", "auth.json")

# Start-up without network calls (update checks); harmless on older pi (bridge/agents/pi/command.py).
OFFLINE_ENV = {"PI_OFFLINE": "1"}

# The environment variables pi reads provider API keys from (pi's docs/providers.md).
PROVIDER_KEY_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_CLOUD_API_KEY",
    "OPENROUTER_API_KEY",
    "AI_GATEWAY_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "CEREBRAS_API_KEY",
    "XAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "FIREWORKS_API_KEY",
    "TOGETHER_API_KEY",
    "NVIDIA_API_KEY",
    "MOONSHOT_API_KEY",
    "KIMI_API_KEY",
    "ZAI_API_KEY",
    "MINIMAX_API_KEY",
    "HF_TOKEN",
    "COPILOT_GITHUB_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
)

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first `X.Y.Z` in `text` (`v22.19.0`, `1.6.0`), or None."""
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def format_version(version: tuple[int, ...]) -> str:
    """`(22, 19, 0)` as `22.19.0`."""
    return ".".join(str(part) for part in version)


# Where an editor's user sets a key or picks the scripted model (the doctor's report is read there).
EDITOR_KEY_ADVICE: Final = (
    'In VS Code: the chat\'s "Set a provider and key…" or "Try the scripted model" button (or the '
    "piBridge.bridge.env setting); in Neovim: setup({ cmd_env = { ANTHROPIC_API_KEY = ... } }), or "
    "cmd_env = { PI_BRIDGE_SCRIPTED_MODEL = '1' } for the scripted model."
)


def checks(
    command: tuple[str, ...], source: str, environ: Mapping[str, str], scripted_model: bool
) -> list[Check]:
    """pi's checks in order; the model check is skipped without a working pi."""
    node = check_node(environ)
    pi = check_pi(command, source, environ, node_ok=node.status == "ok")
    found = [node, pi]
    if pi.status == "ok":
        found.append(check_models((pi.data["path"], *command[1:]), environ, scripted_model))
    else:
        found.append(Check("models", "pi models", "skip", "skipped: needs a working pi"))
    found.append(check_api_keys(environ, scripted_model))
    return found


def check_node(environ: Mapping[str, str]) -> Check:
    """Node is on PATH and at least the version pi needs."""
    node = which("node", environ)
    if node is None:
        return Check("node", "Node", "fail", "node not found on PATH", NODE_INSTALL_HINT)
    probe = run_probe([node, "--version"], environ, tempfile.gettempdir())
    version = parse_version(probe.output) if probe.code == 0 else None
    if version is None:
        return Check(
            "node",
            "Node",
            "fail",
            f"{node} --version failed: {last_line(probe.output)}",
            NODE_INSTALL_HINT,
            {"path": node},
        )
    data = {"path": node, "version": format_version(version)}
    if version < NODE_MIN_VERSION:
        return Check(
            "node",
            "Node",
            "fail",
            f"{format_version(version)} ({node}) is older than the "
            f"{format_version(NODE_MIN_VERSION)} pi needs",
            NODE_INSTALL_HINT,
            data,
        )
    return Check("node", "Node", "ok", f"{format_version(version)} ({node})", data=data)


def check_pi(command: tuple[str, ...], source: str, environ: Mapping[str, str], node_ok: bool) -> Check:
    """pi is where the server would look for it, starts, and is at least the tested version.

    `pi --version` writes auth.json and a sessions folder into its agent dir: it runs with a
    throwaway agent dir (AGENT_DIR_ENV) so the doctor never writes into the user's.
    """
    shown = " ".join(command)
    exe = which(command[0], environ) if command else None
    # What an editor needs to offer the install itself (VS Code's "Install pi" / "Open Docs").
    data: dict[str, Any] = {
        "command": list(command),
        "source": source,
        "installCommand": f"{PI_INSTALL_COMMAND}@latest",
        "docsUrl": PI_DOCS_URL,
    }
    if exe is None:
        return Check(
            "pi",
            "pi",
            "fail",
            f"{command[0] if command else '(empty command)'} not found ({source})",
            f"{PI_INSTALL_COMMAND}   (or point --pi-command / PI_BRIDGE_PI_COMMAND at it)",
            data,
        )
    data["path"] = exe
    with tempfile.TemporaryDirectory(prefix="pi-bridge-doctor-") as scratch:
        env = {**environ, **OFFLINE_ENV, AGENT_DIR_ENV: scratch}
        probe = run_probe([exe, *command[1:], "--version"], env, scratch)
    version = parse_version(last_line(probe.output)) if probe.code == 0 else None
    if version is None:
        return Check(
            "pi",
            "pi",
            "fail",
            f"`{shown} --version` failed (exit {probe.code}): {last_line(probe.output)}",
            "fix Node first (see above)" if not node_ok else f"reinstall pi: {PI_INSTALL_COMMAND}",
            data,
        )
    data["version"] = format_version(version)
    if version < PI_MIN_VERSION:
        return Check(
            "pi",
            "pi",
            "fail",
            f"{format_version(version)} ({exe}) is older than {format_version(PI_MIN_VERSION)}, "
            "the oldest pi the bridge is tested with",
            f"{PI_INSTALL_COMMAND}@latest",
            data,
        )
    return Check("pi", "pi", "ok", f"{format_version(version)} ({exe}, from {source})", data=data)


def user_agent_dir(environ: Mapping[str, str]) -> Path:
    """pi's agent dir for this environment: its AGENT_DIR_ENV variable, else its default dir."""
    return Path(agent_dir(environ))


def _model_rows(listing: str) -> list[tuple[str, str]]:
    """(provider, model) of each row of `pi --list-models`' table: the lines after its header."""
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in listing.splitlines():
        words = line.split()
        if words[:2] == ["provider", "model"]:
            in_table = True
        elif in_table and len(words) >= 2 and not line[0].isspace():
            rows.append((words[0], words[1]))
        elif in_table:
            in_table = False
    return rows


def check_models(command: tuple[str, ...], environ: Mapping[str, str], scripted_model: bool) -> Check:
    """pi's model configuration answers: `pi --list-models` names at least one usable model.

    It reads a copy of the user's models.json, settings.json and auth.json in a throwaway agent
    dir, so the user's configuration (and keys in the environment) count, and nothing is written
    to the user's agent dir. With --scripted-model the bridge's own configuration is checked.
    """
    source = user_agent_dir(environ)
    with tempfile.TemporaryDirectory(prefix="pi-bridge-doctor-") as scratch:
        if scripted_model:
            from bridge.scripted_model import write_pi_agent_dir

            # --list-models only reads the configuration; no model server needs to listen.
            write_pi_agent_dir(Path(scratch), "http://127.0.0.1:9/v1", provider="fake")
            where = "the built-in scripted model"
        else:
            for name in MODEL_CONFIG_FILES:
                if (source / name).is_file():
                    shutil.copyfile(source / name, Path(scratch) / name)
                    os.chmod(Path(scratch) / name, 0o600)
            where = str(source)
        env = {**environ, **OFFLINE_ENV, AGENT_DIR_ENV: scratch}
        probe = run_probe([*command, "--list-models"], env, scratch)
    rows = _model_rows(probe.output)
    providers = sorted({provider for provider, _model in rows})
    data: dict[str, Any] = {"agentDir": where, "models": len(rows), "providers": providers}
    if probe.code != 0 or not rows:
        key_example = PROVIDER_KEY_VARIABLES[0]
        return Check(
            "models",
            "pi models",
            "fail",
            f"pi has no model it can use (configuration: {where})"
            if probe.code == 0
            else f"`pi --list-models` failed (exit {probe.code}): {last_line(probe.output)}",
            f"export {key_example}=... (or another provider's key), or add a provider to "
            f"{source}/models.json (pi's docs/models.md); to try without a key: pi-bridge --scripted-model. "
            f"{EDITOR_KEY_ADVICE}",
            data,
        )
    return Check(
        "models",
        "pi models",
        "ok",
        f"{len(rows)} models from {', '.join(providers)} ({where})",
        data=data,
    )


def check_api_keys(environ: Mapping[str, str], scripted_model: bool) -> Check:
    """Which provider API-key variables are set: names only, never values."""
    names = [name for name in PROVIDER_KEY_VARIABLES if environ.get(name)]
    data: dict[str, Any] = {"set": names}
    if names:
        return Check("apiKeys", "API keys", "ok", "set: " + ", ".join(names), data=data)
    if scripted_model:
        return Check("apiKeys", "API keys", "ok", "none set (not needed with the scripted model)", data=data)
    return Check(
        "apiKeys",
        "API keys",
        "warn",
        "no provider key variable is set (fine if pi's auth.json or models.json holds the key)",
        f"export {PROVIDER_KEY_VARIABLES[0]}=... (or another provider's key variable). {EDITOR_KEY_ADVICE}",
        data,
    )
