"""An ACP agent's models, own modes, config options and commands, read from what it sends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any, Final

from bridge.agents.acp.catalog import AcpAgentSpec
from bridge.agents.values import SESSION_MODE, AgentCommand, AgentOption, ModelChoice, OptionChoice

#: The config option the bridge's own model option stands for (live.py sets it).
MODEL_ID = "model"
#: How long after its session opens an agent's first `available_commands_update` is waited for.
COMMANDS_WAIT_SECONDS: Final = 2.0


def _choices(raw: Any, left_out: frozenset[str] = frozenset()) -> tuple[OptionChoice, ...]:
    """The values of a select (grouped ones flattened), but those `left_out`."""
    found: list[OptionChoice] = []
    for item in raw or []:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("options"), list):  # a group
            found += _choices(item["options"], left_out)
        elif isinstance(item.get("value"), str) and item["value"] not in left_out:
            description = item.get("description")
            found.append(
                OptionChoice(
                    value=item["value"],
                    name=str(item.get("name") or item["value"]),
                    description=description if isinstance(description, str) else None,
                )
            )
    return tuple(found)


def config_options(spec: AcpAgentSpec, raw: Any) -> tuple[AgentOption, ...]:
    """The agent's select config options but its model (the bridge's model option is that one);
    a mode that stops it asking is left out (`AcpAgentSpec.unoffered_modes`)."""
    options: list[AgentOption] = []
    for option in raw or []:
        if not isinstance(option, dict) or option.get("type", "select") != "select":
            continue
        option_id, current = option.get("id"), option.get("currentValue")
        if not isinstance(option_id, str) or option_id == MODEL_ID or not isinstance(current, str):
            continue
        category, description = option.get("category"), option.get("description")
        left_out = spec.unoffered_modes if category == "mode" else frozenset()
        options.append(
            AgentOption(
                option_id=option_id,
                name=str(option.get("name") or option_id),
                category=category if isinstance(category, str) else None,
                current=current,
                choices=_choices(option.get("options"), left_out),
                description=description if isinstance(description, str) else None,
            )
        )
    return tuple(options)


def modes(spec: AcpAgentSpec, raw: Any) -> tuple[AgentOption, ...]:
    """The agent's session modes (`modes` of session/new) as one option, `SESSION_MODE`; those
    that stop it asking are left out (`AcpAgentSpec.unoffered_modes`)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("currentModeId"), str):
        return ()
    choices = _choices(
        (
            {"value": m["id"], "name": m.get("name"), "description": m.get("description")}
            for m in raw.get("availableModes") or []
            if isinstance(m, dict) and isinstance(m.get("id"), str)
        ),
        spec.unoffered_modes,
    )
    return (AgentOption(SESSION_MODE, "Agent mode", "mode", raw["currentModeId"], choices),)


def opened_options(spec: AcpAgentSpec, opened: dict[str, Any]) -> tuple[AgentOption, ...]:
    """What a session/new or session/load answer offers of the agent's own."""
    return (*modes(spec, opened.get("modes")), *config_options(spec, opened.get("configOptions")))


def updated(
    spec: AcpAgentSpec, options: tuple[AgentOption, ...], update: dict[str, Any]
) -> tuple[AgentOption, ...] | None:
    """The options after a `current_mode_update` or `config_option_update`; None for another update."""
    kind = update.get("sessionUpdate")
    if kind == "config_option_update":
        kept = tuple(o for o in options if o.option_id == SESSION_MODE)
        return (*kept, *config_options(spec, update.get("configOptions")))
    if kind == "current_mode_update" and isinstance(update.get("currentModeId"), str):
        return with_current(options, SESSION_MODE, update["currentModeId"])
    return None


def with_current(options: tuple[AgentOption, ...], option_id: str, value: str) -> tuple[AgentOption, ...]:
    """`options` with `option_id` now at `value`."""
    return tuple(
        AgentOption(o.option_id, o.name, o.category, value, o.choices, o.description)
        if o.option_id == option_id
        else o
        for o in options
    )


def commands(update: dict[str, Any]) -> tuple[AgentCommand, ...] | None:
    """The commands of an `available_commands_update`; None for another update."""
    if update.get("sessionUpdate") != "available_commands_update":
        return None
    found: list[AgentCommand] = []
    for command in update.get("availableCommands") or []:
        if not isinstance(command, dict) or not isinstance(command.get("name"), str):
            continue
        given = command.get("input")
        hint = given.get("hint") if isinstance(given, dict) else None
        found.append(
            AgentCommand(
                name=command["name"],
                description=str(command.get("description") or ""),
                source="agent",
                argument_hint=hint if isinstance(hint, str) else None,
            )
        )
    return tuple(found)


class CommandsHeard:
    """An agent's own commands, as its last `available_commands_update` listed them.

    Agents send their first list after their answer to session/new or session/load (OpenCode a
    moment later): asked just after the session opened, the list is waited for, bounded from the
    opening, so an agent that lists none is asked in vain only that once."""

    def __init__(self) -> None:
        self._listed: tuple[AgentCommand, ...] = ()
        self._heard = asyncio.Event()
        self._opened_at = 0.0

    def opened(self) -> None:
        """The session has opened: its list is on its way."""
        self._opened_at = time.monotonic()

    def note(self, update: dict[str, Any]) -> None:
        """Keep the list if `update` is one."""
        listed = commands(update)
        if listed is not None:
            self._listed = listed
            self._heard.set()

    async def current(self) -> list[AgentCommand]:
        """The last list (the first one waited for, within the bound from the opening)."""
        left = self._opened_at + COMMANDS_WAIT_SECONDS - time.monotonic()
        if not self._heard.is_set() and left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heard.wait(), left)
        return list(self._listed)


def read_models(spec: AcpAgentSpec, opened: Mapping[str, Any]) -> tuple[tuple[ModelChoice, ...], str | None]:
    """The models the session offers (its `model` config option), and the one it runs."""
    current: str | None = None
    models: tuple[ModelChoice, ...] = ()
    for option in opened.get("configOptions") or []:
        if not isinstance(option, dict) or option.get("id") != MODEL_ID:
            continue
        value = option.get("currentValue")
        current = value if isinstance(value, str) else None
        models = tuple(
            _model_choice(spec, str(o["value"]), str(o.get("name") or o["value"]))
            for o in option.get("options") or []
            if isinstance(o, dict) and o.get("value")
        )
    if current and spec.model_format == "provider/model" and "/" in current:
        return models, current.split("/", 1)[1]
    return models, current


def _model_choice(spec: AcpAgentSpec, value: str, name: str) -> ModelChoice:
    """A model the session offers; an agent that writes "provider/model" says its provider."""
    if spec.model_format == "provider/model" and "/" in value:
        provider, model = value.split("/", 1)
        return ModelChoice(provider, model, name)
    return ModelChoice(spec.provider, value, name)
