"""An ACP agent's own modes, models and commands through the ACP front (`pi-bridge acp
--agent opencode`), driven by the official SDK's client against the scripted model: what the
agent offers reaches the editor beside the bridge's own options, and what the editor sets
reaches the agent, judged from the scripted model's received requests.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from bridge.scripted_model import ScriptedModelServer
from tests.e2e.test_acp_agent_inputs import wait_gone
from tests.e2e.test_acp_agents import FAST_RETRY, _acp_front, agent_processes, requires_acp_agents
from tests.support.acp import prompt
from tests.support.env import WAIT, requires_pi
from tests.support.leaks import assert_no_run_processes

pytestmark = [requires_pi, requires_acp_agents, pytest.mark.realpi, pytest.mark.slow]

#: What OpenCode 1.18.33 adds to a prompt in its plan mode (measured from the model's requests).
PLAN_REMINDER = "Plan Mode - System Reminder"


def _options(answer: Any) -> dict[str, Any]:
    """The configOptions of an answer, by id, as the wire carries them."""
    return {o.root.id if hasattr(o, "root") else o.id: _wire(o) for o in answer.config_options or []}


def _wire(option: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = option.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _tools(request: dict[str, Any]) -> set[str]:
    """The tool names a model request offers."""
    return {
        str(t.get("name") or t.get("function", {}).get("name")) for t in request["body"].get("tools") or []
    }


async def test_opencodes_modes_model_and_commands_pass_through_the_acp_front(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with _acp_front("opencode", "echo", scripted_model, pi_agent_dir, tmp_path) as (conn, recorder, _):
        work = tmp_path / "work"
        opened = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[]), WAIT)
        sid = opened.session_id
        options = _options(opened)
        # the bridge's own options and modes are as the contract defines them
        assert [o for o in options if not o.startswith("agent.")] == ["model", "mode"]
        assert options["mode"]["category"] == "mode" and options["mode"]["currentValue"] == "ask"
        assert opened.modes is not None and opened.modes.current_mode_id == "ask"
        # the model option lists OpenCode's own models; its session modes come beside it
        models = [o["value"] for o in options["model"]["options"]]
        assert "scripted/echo" in models and "scripted/text" in models, models
        assert options["model"]["currentValue"] == "scripted/echo"
        own_mode = options["agent.mode"]
        assert [c["value"] for c in own_mode["options"]] == ["build", "plan"]
        assert own_mode["currentValue"] == "build" and "category" not in own_mode
        assert own_mode["_meta"] == {"piBridge": {"agentCategory": "mode"}}

        # OpenCode's own commands reach the editor (after the first prompt at the latest)
        answer = await prompt(conn, sid, "hello", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        listed = await recorder.wait_for(
            lambda u: (
                u.session_update == "available_commands_update"
                and any(c.name == "review" for c in u.available_commands)
            )
        )
        review = next(c for c in listed.available_commands if c.name == "review")
        assert review.field_meta == {"piBridge": {"source": "agent"}}
        assert PLAN_REMINDER not in json.dumps(scripted_model.requests[-1]["body"]["messages"])

        # the agent's mode, set by the editor, goes to OpenCode: its next request is plan mode's
        changed = await asyncio.wait_for(
            conn.set_config_option(config_id="agent.mode", session_id=sid, value="plan"), WAIT
        )
        assert _options(changed)["agent.mode"]["currentValue"] == "plan"
        assert _options(changed)["mode"]["currentValue"] == "ask", "the bridge's own mode is untouched"
        before = len(scripted_model.requests)
        assert (await prompt(conn, sid, "plan it", timeout=WAIT * 2)).stop_reason == "end_turn"
        planned = scripted_model.requests[before:]
        assert planned and planned[-1]["model"] == "echo"
        assert "plan it" in json.dumps(planned[-1]["body"]["messages"])
        assert PLAN_REMINDER in json.dumps(planned[-1]["body"]["messages"]), "OpenCode is in its plan mode"

        # the model, set by the editor, is the one the next prompt goes to
        await asyncio.wait_for(
            conn.set_config_option(config_id="model", session_id=sid, value="scripted/text"), WAIT
        )
        before = len(scripted_model.requests)
        assert (await prompt(conn, sid, "which model", timeout=WAIT * 2)).stop_reason == "end_turn"
        asked = [r for r in scripted_model.requests[before:] if "which model" in json.dumps(r["body"])]
        assert asked and {r["model"] for r in asked} == {"text"}, [r["model"] for r in asked]
        # OpenCode's todo list reaches the editor as the plan
        # a value or an option the agent does not offer is refused by the front
        with pytest.raises(Exception, match="not one of"):
            await asyncio.wait_for(
                conn.set_config_option(config_id="agent.mode", session_id=sid, value="yolo"), WAIT
            )
        with pytest.raises(Exception, match="no option 'model'"):
            await asyncio.wait_for(
                conn.set_config_option(config_id="agent.model", session_id=sid, value="scripted/echo"), WAIT
            )
    await assert_no_run_processes()


async def test_gemini_offers_its_own_modes_but_those_that_stop_it_asking_and_set_mode_reaches_it(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with _acp_front("gemini", "echo", scripted_model, pi_agent_dir, tmp_path) as (conn, recorder, _):
        opened = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path / "work"), mcp_servers=[]), WAIT)
        sid = opened.session_id
        own_mode = _options(opened)["agent.session_mode"]
        assert [c["value"] for c in own_mode["options"]] == ["default", "plan"], "no autoEdit, no yolo"
        assert own_mode["currentValue"] == "default"
        assert opened.modes is not None and opened.modes.current_mode_id == "ask", "the bridge's modes"
        assert (await prompt(conn, sid, "first turn", timeout=WAIT * 2)).stop_reason == "end_turn"
        first = scripted_model.requests[-1]
        with pytest.raises(Exception, match="not one of"):
            await asyncio.wait_for(
                conn.set_config_option(config_id="agent.session_mode", session_id=sid, value="yolo"), WAIT
            )
        changed = await asyncio.wait_for(
            conn.set_config_option(config_id="agent.session_mode", session_id=sid, value="plan"), WAIT
        )
        assert _options(changed)["agent.session_mode"]["currentValue"] == "plan"
        before = len(scripted_model.requests)
        assert (await prompt(conn, sid, "second turn", timeout=WAIT * 2)).stop_reason == "end_turn"
        second = scripted_model.requests[before:][-1]
        assert "second turn" in json.dumps(second["body"]["messages"])
        # Gemini CLI 0.61.0 in its plan mode (measured): the system prompt says so, and
        # `exit_plan_mode` replaces `enter_plan_mode` among the tools
        assert "operating in **Default** mode" in first["body"]["system"]
        assert "operating in **Plan** mode" in second["body"]["system"]
        assert "enter_plan_mode" in _tools(first) and "exit_plan_mode" in _tools(second)
    await assert_no_run_processes()


async def test_claude_agent_acps_plan_and_usage_reach_the_editor_and_its_bypass_modes_do_not(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Guard the division", "status": "in_progress", "activeForm": "Guarding the division"},
    ]
    script = json.dumps([["TodoWrite", {"todos": todos}]])
    async with _acp_front("claude-acp", "script", scripted_model, pi_agent_dir, tmp_path) as (
        conn,
        recorder,
        _,
    ):
        opened = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path / "work"), mcp_servers=[]), WAIT)
        sid = opened.session_id
        own = _options(opened)
        # its modes and config options of category mode, but those that stop it asking
        assert [c["value"] for c in own["agent.session_mode"]["options"]] == ["default", "plan"]
        assert [c["value"] for c in own["agent.mode"]["options"]] == ["default", "plan"]
        assert (await prompt(conn, sid, script, timeout=WAIT * 2)).stop_reason == "end_turn"
        plans = [u for u in recorder.of(sid) if u.session_update == "plan"]
        assert plans, [u.session_update for u in recorder.of(sid)]
        # claude-agent-acp 0.101.0 renders a TodoWrite call as ACP's plan (an entry in progress
        # by its activeForm), even though its Claude Code then refuses the tool
        assert [(e.content, e.status) for e in plans[-1].entries] == [
            ("Read the parser", "completed"),
            ("Guarding the division", "in_progress"),
        ]
        # its usage_update (context use and cost) reaches the editor through terminal.completed
        usage = [u for u in recorder.of(sid) if u.session_update == "usage_update"]
        assert usage and usage[-1].used > 0 and usage[-1].size > usage[-1].used, usage
    await assert_no_run_processes()


async def test_opencodes_mode_and_model_set_by_the_editor_outlive_its_killed_process(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    """OpenCode killed after the editor set its mode and model, before a prompt ran in them: the
    prompt after goes to the process that loads the conversation, in that mode (set on it: OpenCode
    1.18.33 may or may not have stored it, and its session/load answer names the last stored
    prompt's), to that model."""
    meta = {"piBridge": {"retry": FAST_RETRY}}  # a prompt that races the death is retried
    async with _acp_front("opencode", "echo", scripted_model, pi_agent_dir, tmp_path, meta) as (conn, _, _):
        opened = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path / "work"), mcp_servers=[]), WAIT)
        sid, tag = opened.session_id, os.urandom(4).hex()
        assert (await prompt(conn, sid, f"before-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
        [before] = _turn(scripted_model.requests, f"before-{tag}")
        assert before["model"] == "echo" and PLAN_REMINDER not in json.dumps(before["body"]["messages"])
        for config_id, value in (("agent.mode", "plan"), ("model", "scripted/text")):
            await asyncio.wait_for(
                conn.set_config_option(config_id=config_id, session_id=sid, value=value), WAIT
            )
        [pid] = agent_processes("opencode")  # the conversation's (`_acp_front` keeps no spare)
        psutil.Process(pid).kill()
        await wait_gone(pid)
        seen = len(scripted_model.requests)
        assert (await prompt(conn, sid, f"after-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
        assert pid not in agent_processes("opencode"), "a new process served the prompt"
        after = _turn(scripted_model.requests[seen:], f"after-{tag}")
        assert after and {r["model"] for r in after} == {"text"}, [r["model"] for r in after]
        last = after[-1]["body"]["messages"][-1]
        assert f"after-{tag}" in json.dumps(last) and PLAN_REMINDER in json.dumps(last), (
            "OpenCode is in plan mode"
        )
    await assert_no_run_processes()


def _turn(requests: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The conversation's model requests that carry `text` (not OpenCode's title request, which
    goes to its configured model and offers no tools)."""
    return [r for r in requests if r["body"].get("tools") and text in json.dumps(r["body"])]
