"""An ACP agent's own modes, config options and commands, as session/new and updates give them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from bridge.agents.acp import kept_options, live
from bridge.agents.acp import options as own
from bridge.agents.acp.catalog import CATALOG, SESSION_ENV
from bridge.agents.acp.kept_options import AcpConversationLive, KeptOptions
from bridge.agents.acp.live import AcpLive
from bridge.agents.values import SESSION_MODE, AgentCommand, LiveError
from bridge.process import shutdown, spawn
from bridge.process.spawn import ChildProcess

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


def _commands_update(session_id: str, *names: str) -> bytes:
    """An `available_commands_update` line of `session_id` listing `names`."""
    commands = [{"name": name, "description": f"the {name} command"} for name in names]
    update = {"sessionUpdate": "available_commands_update", "availableCommands": commands}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }
    return json.dumps(message).encode() + b"\n"


def test_commands_announced_as_the_session_opens_are_kept_and_another_sessions_are_not() -> None:
    """OpenCode announces its commands right after answering session/new: in the same read as that
    answer they come before the client has noted the session's id, and still are the session's."""
    client = AcpLive(cast(ChildProcess, SimpleNamespace(handle=None)), CATALOG["opencode"])
    client._dispatch([_commands_update("ses_opening", "review", "init")])
    assert [c.name for c in anyio.run(client.commands)] == ["review", "init"]
    client._acp_session = "ses_opening"  # as session/new's answer sets it
    client._dispatch([_commands_update("ses_other", "intruder")])
    assert [c.name for c in anyio.run(client.commands)] == ["review", "init"], "another session's list"
    client._dispatch([_commands_update("ses_opening", "review")])
    assert [c.name for c in anyio.run(client.commands)] == ["review"], "the session's own update"


def test_commands_asked_as_a_session_opens_wait_for_the_agents_first_list() -> None:
    """OpenCode lists its commands a moment after answering session/load: a pi/commands asked in
    between gets that list, not an empty one; once the wait's bound from the opening is spent, an
    agent that lists none is answered at once."""
    client = AcpLive(cast(ChildProcess, SimpleNamespace(handle=None)), CATALOG["opencode"])
    client._acp_session = "ses_loaded"

    async def asked_then_listed() -> tuple[list[str], float]:
        client._commands.opened()  # as prepare() notes it
        async with anyio.create_task_group() as tasks:
            names: list[str] = []

            async def ask() -> None:
                names.extend(c.name for c in await client.commands())

            tasks.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            assert names == [], "answered before the agent listed"
            client._dispatch([_commands_update("ses_loaded", "review")])
        return names, time.monotonic() - client._commands._opened_at

    names, took = anyio.run(asked_then_listed)
    assert names == ["review"] and took < own.COMMANDS_WAIT_SECONDS

    silent = AcpLive(cast(ChildProcess, SimpleNamespace(handle=None)), CATALOG["opencode"])
    silent._commands._opened_at = time.monotonic() - own.COMMANDS_WAIT_SECONDS
    started = time.monotonic()
    assert anyio.run(silent.commands) == []
    assert time.monotonic() - started < 0.5, "no wait once the bound from the opening is spent"


class _ScriptedAgent:
    """What an ACP agent answers each method with, and every request a client sent it."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any], timeout: float = 0.0) -> dict[str, Any]:
        self.sent.append((method, params))
        return self.answers.get(method, {})


def _opencode(plan: str, agent: _ScriptedAgent, kept: KeptOptions, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An OpenCode client whose launch asked for session plan `plan`, talking to `agent`."""
    monkeypatch.setattr(kept_options, "launch_env", lambda _child: {SESSION_ENV: plan})
    monkeypatch.setattr(live, "launch_env", lambda _child: {SESSION_ENV: plan})
    client = AcpConversationLive(
        cast(ChildProcess, SimpleNamespace(handle=None)), CATALOG["opencode"], kept=kept
    )
    monkeypatch.setattr(client, "request", agent.request)
    return client


def _with_mode(mode: str) -> dict[str, Any]:
    """A session/new, session/load or set_config_option answer with OpenCode's mode at `mode`."""
    return {
        "sessionId": "ses_a",
        "configOptions": [OPENCODE_OPTIONS[0], {**OPENCODE_OPTIONS[1], "currentValue": mode}],
    }


INITIALIZED = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}


def test_an_agent_that_cannot_load_a_session_is_refused_before_any_session_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _ScriptedAgent(
        {"initialize": {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}}}
    )
    client = _opencode("load:ses_a|conv-1", agent, KeptOptions(), monkeypatch)
    with pytest.raises(LiveError, match="`session/load` cannot be done: this agent cannot load") as refused:
        anyio.run(client.prepare)
    assert refused.value.kind == "refused"
    assert [method for method, _ in agent.sent] == ["initialize"], "no session/new opened a blank one"


def test_an_option_the_editor_set_is_set_again_once_on_the_process_that_loads_the_conversation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = KeptOptions()
    first = _ScriptedAgent(
        {
            "initialize": INITIALIZED,
            "session/new": _with_mode("build"),
            "session/set_config_option": _with_mode("plan"),
        }
    )
    client = _opencode("new:conv-1", first, kept, monkeypatch)
    anyio.run(client.prepare)
    anyio.run(client.set_agent_option, "mode", "plan")
    # the agent's process is gone; the next one loads the session, at its default mode
    second = _ScriptedAgent(
        {
            "initialize": INITIALIZED,
            "session/load": _with_mode("build"),
            "session/set_config_option": _with_mode("plan"),
        }
    )
    reloaded = _opencode("load:ses_a|conv-1", second, kept, monkeypatch)
    state = anyio.run(reloaded.prepare)
    assert state.session_id == "conv-1"
    assert [(m, p.get("configId"), p.get("value")) for m, p in second.sent] == [
        ("initialize", None, None),
        ("session/load", None, None),
        ("session/set_config_option", "mode", "plan"),
    ], "set again once, before any prompt"
    assert [(o.option_id, o.current) for o in anyio.run(reloaded.agent_options)] == [("mode", "plan")]
    # the agent leaves plan mode itself: that is what a next process gets (nothing to set)
    reloaded._dispatch([_config_update("ses_a", "build")])
    third = _ScriptedAgent({"initialize": INITIALIZED, "session/load": _with_mode("build")})
    anyio.run(_opencode("load:ses_a|conv-1", third, kept, monkeypatch).prepare)
    assert [m for m, _ in third.sent] == ["initialize", "session/load"]
    # another conversation of the same agent gets nothing of this one's
    other = _ScriptedAgent({"initialize": INITIALIZED, "session/load": _with_mode("build")})
    anyio.run(_opencode("load:ses_b|conv-2", other, kept, monkeypatch).prepare)
    assert [m for m, _ in other.sent] == ["initialize", "session/load"]


def _chunk(session_id: str, kind: str, text: str) -> bytes:
    """A `user_message_chunk` or `agent_message_chunk` line of `session_id`."""
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }
    return json.dumps(message).encode() + b"\n"


def test_a_load_says_what_it_replayed_and_a_replay_that_comes_after_the_answer_is_told(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A loaded session's history is what the agent replays before answering session/load; the
    log says how much came, and a message chunk after the answer and before any prompt (a replay
    come late, which the history read does not hold) is told once."""
    caplog.set_level("INFO", logger="bridge.agents.acp.kept_options")
    agent = _ScriptedAgent({"initialize": INITIALIZED, "session/load": _with_mode("build")})
    client = _opencode("load:ses_a|conv-1", agent, KeptOptions(), monkeypatch)
    original = agent.request

    async def load_with_replay(method: str, params: dict[str, Any], timeout: float = 0.0) -> dict[str, Any]:
        if method == "session/load":
            client._dispatch(
                [_chunk("ses_a", "user_message_chunk", "one"), _chunk("ses_a", "agent_message_chunk", "1")]
            )
        return await original(method, params, timeout)

    monkeypatch.setattr(client, "request", load_with_replay)
    anyio.run(client.prepare)
    history = client.take_replayed()
    assert history is not None and [t.prompt for t in history.turns] == ["one"]
    assert "loaded ses_a: 2 updates replayed, 1 turns" in caplog.text
    client._dispatch(
        [_chunk("ses_a", "user_message_chunk", "two"), _chunk("ses_a", "agent_message_chunk", "2")]
    )
    late = [r for r in caplog.records if "after answering its load" in r.getMessage()]
    assert len(late) == 1 and late[0].levelname == "WARNING"


def _config_update(session_id: str, mode: str) -> bytes:
    """A `config_option_update` of `session_id` with OpenCode's mode at `mode`."""
    update = {"sessionUpdate": "config_option_update", "configOptions": _with_mode(mode)["configOptions"]}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }
    return json.dumps(message).encode() + b"\n"


class _BeforeTheExec:
    """What /proc shows of a process whose exec is not done yet: its parent's environment."""

    def environ(self) -> dict[str, str]:
        return dict(os.environ)


async def test_a_client_reads_the_launch_s_session_plan_from_the_launch_not_from_proc(tmp_path: Path) -> None:
    """A client reads its session plan first thing after the spawn, when /proc may still show the
    parent's environment: a load then went unrecorded (its replay lost). The plan is the launch's."""
    plan = "load:agent-id|bridge-id"
    child = await spawn.spawn(("sleep", "300"), str(tmp_path), {SESSION_ENV: plan})
    try:
        child.handle = cast(Any, _BeforeTheExec())
        assert live.launch_env(child)[SESSION_ENV] == plan
        assert live.launch_env(child)[spawn.RUN_TOKEN_ENV] == child.token
    finally:
        await shutdown.shutdown_tree(child)
        spawn.forget(child)
        await child.process.aclose()
