"""Point Codex, OpenCode and Gemini CLI at the scripted model: the files and environment each
needs to run offline (no login, no telemetry, no update check), in a home the caller owns.
"""

from __future__ import annotations

import json
import pathlib
from typing import Final

from bridge.scripted_model.scenarios import SCENARIOS

#: The API key every agent is given: the scripted model accepts any.
SCRIPTED_KEY: Final = "scripted-model-key"
#: The provider name the agents' configurations give the scripted model.
PROVIDER: Final = "scripted"


def _toml_string(value: str) -> str:
    return json.dumps(value)


def codex_env(home: pathlib.Path, origin: str, model: str = "echo") -> dict[str, str]:
    """A ``CODEX_HOME`` whose config.toml selects the scripted model over the Responses API
    (``origin``: ``http://127.0.0.1:PORT``), with no retries, no update check, no analytics."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        "\n".join(
            [
                f"model = {_toml_string(model)}",
                f"model_provider = {_toml_string(PROVIDER)}",
                "check_for_update_on_startup = false",
                "",
                f"[model_providers.{PROVIDER}]",
                f"name = {_toml_string(PROVIDER)}",
                f"base_url = {_toml_string(origin + '/v1')}",
                'wire_api = "responses"',
                'env_key = "SCRIPTED_MODEL_KEY"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "",
                "[analytics]",
                "enabled = false",
                "",
                "[otel]",
                'exporter = "none"',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return {"HOME": str(home), "CODEX_HOME": str(codex_home), "SCRIPTED_MODEL_KEY": SCRIPTED_KEY}


#: A closed loopback port: a registry lookup fails fast instead of leaving the machine.
DEAD_REGISTRY = "http://127.0.0.1:9/"


def opencode_env(home: pathlib.Path, origin: str, model: str = "echo") -> dict[str, str]:
    """OpenCode's configuration in ``OPENCODE_CONFIG_CONTENT``: an OpenAI-compatible provider at
    the scripted model offering every scenario, ``model`` selected; its XDG directories under
    ``home``; no models.dev fetch, no autoupdate, no sharing."""
    # Every model takes images, as pi's do (pi_config.py): OpenCode replaces an image a model
    # does not take with a text of its own, while its ACP side still says it takes images.
    modalities = {"input": ["text", "image"], "output": ["text"]}
    models = {name: {"name": name, "modalities": modalities} for name in sorted({*SCENARIOS, model})}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/echo",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER,
                "options": {"baseURL": origin + "/v1", "apiKey": SCRIPTED_KEY},
                "models": models,
            }
        },
    }
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        # OpenCode asks the npm registry on every start (its provider packages): tests and the
        # bridge's own runs on the scripted model stay on loopback, so the ask fails at once.
        "NPM_CONFIG_REGISTRY": DEAD_REGISTRY,
        "BUN_CONFIG_REGISTRY": DEAD_REGISTRY,
    }


def gemini_env(home: pathlib.Path, origin: str, model: str = "echo") -> dict[str, str]:
    """A ``HOME`` whose ~/.gemini/settings.json selects API-key auth and ``model`` (a concrete
    one: "auto" first asks a router model), with telemetry, usage statistics and update checks
    off; ``GOOGLE_GEMINI_BASE_URL`` at the scripted model; the workspace trusted."""
    settings_dir = home / ".gemini"
    settings_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "model": {"name": model},
    }
    (settings_dir / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    return {
        "HOME": str(home),
        "GEMINI_API_KEY": SCRIPTED_KEY,
        "GOOGLE_GEMINI_BASE_URL": origin,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
