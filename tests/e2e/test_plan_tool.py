"""pi's plan: with `planTool` the bridge's extension offers the model a `todo` tool, and what the
model does with it reaches the client as `plan` messages; without it the model is not offered it.
Judged from the scripted model's received requests and from the messages the client gets."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.scenarios import NO_SUCH_TOOL, TODO_PLAN
from tests.conftest import requires_pi
from tests.support.acp import acp_bridge, new_session, prompt
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, initialize, scripted_run

pytestmark = [requires_pi, pytest.mark.realpi]

STATE_DIR = tempfile.mkdtemp(prefix="pi-bridge-plan-tool-state-")


def _offered(scripted_model: ScriptedModelServer, tag: str) -> list[str]:
    """The tool names of every request of the run whose prompt holds `tag` (one list each)."""
    seen = [r["body"] for r in scripted_model.requests if r["body"] and tag in json.dumps(r["body"])]
    assert seen, "the run reached the model"
    names = {
        tuple(t.get("name") or (t.get("function") or {}).get("name") for t in b.get("tools") or [])
        for b in seen
    }
    assert len(names) == 1, names
    return list(names.pop())


async def _bridge(client: LanguageClient, pi_agent_dir: Path, **options: Any) -> None:
    env = {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}
    await initialize(client, {"env": env, "warmPool": False, **options})


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR}))
async def planning(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    await _bridge(lsp_client, pi_agent_dir, planTool=True)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR}))
async def plain(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    await _bridge(lsp_client, pi_agent_dir)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_with_plan_tool_the_model_s_todo_calls_reach_the_client_as_plans(
    planning: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    tag = f"plan-{os.urandom(4).hex()}"
    result, messages = await scripted_run(planning, tmp_path, "todo", prompt=tag, mode="ask")
    assert result["status"] == "completed", messages[-3:]
    assert _offered(scripted_model, tag) == ["read", "bash", "edit", "write", "todo"]
    plans = [[(e["content"], e["status"]) for e in plan["entries"]] for plan in contents_of(messages, "plan")]
    assert plans == [
        [("Read the parser", "pending")],
        [("Read the parser", "pending"), ("Fix division by zero", "pending")],
        [("Read the parser", "completed"), ("Fix division by zero", "pending")],
        [("Read the parser", "completed"), ("Fix division by zero", "in_progress")],
    ]
    assert plans[-1] == list(TODO_PLAN)
    # The gate did not ask about it: the todo list is pi's memory only, even in `ask` mode.
    assert not contents_of(messages, "permission.requested"), "no permission asked"
    completed = [c for c in contents_of(messages, "tool.completed") if c["name"] == "todo"]
    assert len(completed) == 4 and "Todo #1 completed" in completed[-2]["output"]
    assert "Started todo #2" in completed[-1]["output"]


async def test_without_plan_tool_the_model_is_not_offered_todo_and_no_plan_comes(
    plain: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    tag = f"plan-{os.urandom(4).hex()}"
    result, messages = await scripted_run(plain, tmp_path, "todo", prompt=tag)
    assert result["status"] == "completed"
    assert "todo" not in _offered(scripted_model, tag)
    assert "".join(c["text"] for c in contents_of(messages, "assistant")) == NO_SUCH_TOOL.format(name="todo")
    assert not contents_of(messages, "plan")


async def test_acp_with_plan_tool_the_session_gets_acp_plan_updates(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    """`pi-bridge acp --plan-tool`: the same todo calls reach the ACP client as `plan` updates,
    and the gate asks nothing about them (the session starts in `ask`)."""
    async with acp_bridge(pi_agent_dir, tmp_path, args=("--plan-tool",)) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "todo")
        tag = f"plan-{os.urandom(4).hex()}"
        answer = await prompt(conn, session_id, tag)
        assert answer.stop_reason == "end_turn"
        assert "todo" in _offered(scripted_model, tag)
        plans = [u for u in recorder.of(session_id) if u.session_update == "plan"]
        assert [(e.content, e.status) for e in plans[-1].entries] == list(TODO_PLAN)
        assert len(plans) == 4 and not recorder.permission_requests
