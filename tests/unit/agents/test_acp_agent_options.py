"""An ACP agent's own modes, config options and commands, as session/new and updates give them."""

from __future__ import annotations

from bridge.agents.acp import options as own
from bridge.agents.acp.catalog import CATALOG
from bridge.agents.values import SESSION_MODE, AgentCommand

#: Gemini CLI 0.61.0's session/new answer (measured), and OpenCode 1.18.33's config options.
GEMINI_OPENED = {
    "sessionId": "s",
    "modes": {
        "currentModeId": "default",
        "availableModes": [
            {"id": "default", "name": "Default", "description": "Prompts for approval"},
            {"id": "autoEdit", "name": "Auto Edit", "description": "Auto-approves edit tools"},
            {"id": "yolo", "name": "YOLO", "description": "Auto-approves all tools"},
            {"id": "plan", "name": "Plan", "description": "Read-only mode"},
        ],
    },
}
OPENCODE_OPTIONS = [
    {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": "scripted/echo",
        "options": [{"value": "scripted/echo", "name": "echo"}, {"value": "scripted/text", "name": "text"}],
    },
    {
        "id": "mode",
        "name": "Session Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "build",
        "options": [{"value": "build", "name": "build"}, {"value": "plan", "name": "plan"}],
    },
]


def test_modes_that_stop_the_agent_asking_are_not_offered() -> None:
    (modes,) = own.opened_options(CATALOG["gemini"], GEMINI_OPENED)
    assert modes.option_id == SESSION_MODE and modes.current == "default"
    assert [c.value for c in modes.choices] == ["default", "plan"], "autoEdit and yolo decide approvals"
    claude = {
        "currentModeId": "default",
        "availableModes": [
            {"id": m} for m in ("default", "acceptEdits", "plan", "auto", "bypassPermissions")
        ],
    }
    (modes,) = own.modes(CATALOG["claude-acp"], claude)
    assert [c.value for c in modes.choices] == ["default", "plan"]


def test_the_model_option_stays_the_bridges_and_the_rest_follow_the_agents_updates() -> None:
    spec = CATALOG["opencode"]
    options = own.opened_options(spec, {"configOptions": OPENCODE_OPTIONS})
    assert [(o.option_id, o.current, [c.value for c in o.choices]) for o in options] == [
        ("mode", "build", ["build", "plan"])
    ]
    models, current = own.read_models(spec, {"configOptions": OPENCODE_OPTIONS})
    assert current == "echo" and [(m.provider, m.model_id) for m in models] == [
        ("scripted", "echo"),
        ("scripted", "text"),
    ]
    switched = [{**OPENCODE_OPTIONS[1], "currentValue": "plan"}]
    after = own.updated(spec, options, {"sessionUpdate": "config_option_update", "configOptions": switched})
    assert after is not None and after[0].current == "plan"
    assert own.updated(spec, options, {"sessionUpdate": "agent_message_chunk"}) is None
    gemini = own.opened_options(CATALOG["gemini"], GEMINI_OPENED)
    moved = own.updated(
        CATALOG["gemini"], gemini, {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}
    )
    assert moved is not None and moved[0].current == "plan"


def test_available_commands_are_the_agents_own() -> None:
    update = {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            {"name": "review", "description": "review changes", "input": {"hint": "[commit|branch]"}},
            {"name": "init"},
            {"description": "no name"},
        ],
    }
    assert own.commands(update) == (
        AgentCommand("review", "review changes", "agent", "[commit|branch]"),
        AgentCommand("init", "", "agent", None),
    )
    assert own.commands({"sessionUpdate": "plan"}) is None
