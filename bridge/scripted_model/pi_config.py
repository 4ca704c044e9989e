"""The pi agent dir that points pi at the scripted model (models.json, settings.json)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from bridge.scripted_model.scenarios import SCENARIOS

# pi configuration


def _anthropic_base(base_url: str) -> str:
    # pi's anthropic-messages client appends /v1/messages itself.
    base = base_url.rstrip("/")
    return base.removesuffix("/v1")


def write_pi_agent_dir(
    agent_dir: pathlib.Path,
    base_url: str,
    *,
    provider: str = "fake",
    disable_pi_retry: bool = False,
) -> None:
    """Write models.json (provider `provider` with every scenario in SCENARIOS as a
    model id taking text and images, api openai-completions, apiKey "x", compat {supportsDeveloperRole:false,
    supportsReasoningEffort:false}), plus an `anthropic` style provider named
    f"{provider}-anthropic" (api "anthropic-messages", baseUrl without /v1: pi appends
    /v1/messages itself) for the thinking_anthropic scenario, and when disable_pi_retry is true a
    settings.json {"retry":{"enabled":false,"provider":{"maxRetries":0}}}. Create the
    dir if missing.

    The anthropic provider lists every scenario too (the server renders each one in both
    formats); its ``thinking_anthropic`` model is marked ``reasoning: true`` so pi asks for
    thinking the way it would from a real Claude model.
    """
    agent_dir = pathlib.Path(agent_dir)
    agent_dir.mkdir(parents=True, exist_ok=True)
    # Every model takes images, so pi hands a prompt's images on and tests see them arrive.
    both: list[str] = ["text", "image"]
    # Each model is named after what its scenario does: pickers and the chat's `/demo` show it.
    openai_models = [
        {"id": model, "name": description, "input": both} for model, description in SCENARIOS.items()
    ]
    anthropic_models: list[dict[str, Any]] = [
        {"id": model, "input": both, "reasoning": True}
        if model == "thinking_anthropic"
        else {"id": model, "input": both}
        for model in SCENARIOS
    ]
    config = {
        "providers": {
            provider: {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": "x",
                "compat": {
                    "supportsDeveloperRole": False,
                    "supportsReasoningEffort": False,
                },
                "models": openai_models,
            },
            f"{provider}-anthropic": {
                "baseUrl": _anthropic_base(base_url),
                "api": "anthropic-messages",
                "apiKey": "x",
                "models": anthropic_models,
            },
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if disable_pi_retry:
        settings = {"retry": {"enabled": False, "provider": {"maxRetries": 0}}}
        (agent_dir / "settings.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
