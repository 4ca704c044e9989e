"""`pi-bridge acp --agent codex` end to end: the ACP front over the real Codex (`codex app-server`)
against the scripted model's Responses API, driven by the official ACP SDK's client."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from bridge.scripted_model import TEXT_REPLY, ScriptedModelServer
from bridge.scripted_model.agent_configs import codex_env
from tests.e2e.test_codex import CODEX_BIN, NODE_BIN
from tests.support.acp import acp_bridge, new_session, prompt, text_of
from tests.support.env import PI_BIN
from tests.support.model_requests import times_seen

pytestmark = [
    pytest.mark.realpi,
    pytest.mark.skipif(
        not CODEX_BIN.exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
        reason="Codex is not installed in .tools-agents (run scripts/setup.sh)",
    ),
]


def _codex_acp(pi_agent_dir: Path, model: ScriptedModelServer, tmp_path: Path, scenario: str) -> Any:
    """`pi-bridge acp --agent codex` with Codex on scripted scenario `scenario`."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = codex_env(tmp_path / "home", f"http://127.0.0.1:{model.port}", scenario)
    path = os.pathsep.join([str(CODEX_BIN.parent), str(NODE_BIN), str(PI_BIN), os.environ.get("PATH", "")])
    return acp_bridge(pi_agent_dir, work, args=("--agent", "codex"), extra_env={**env, "PATH": path})


async def test_acp_codex_streams_the_answer(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _codex_acp(pi_agent_dir, scripted_model, tmp_path, "text") as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path / "work")
        answer = await prompt(conn, session_id, "Say hello", timeout=60)
        assert answer.stop_reason == "end_turn"
        updates = recorder.of(session_id)
        assert len([u for u in updates if u.session_update == "agent_message_chunk"]) > 3
        assert text_of(updates) == TEXT_REPLY


async def test_acp_codex_second_prompt_goes_on_with_the_thread(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    async with _codex_acp(pi_agent_dir, scripted_model, tmp_path, "echo") as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path / "work")
        assert (await prompt(conn, session_id, f"first-{tag}", timeout=60)).stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == f"ECHO:first-{tag}"
        recorder.clear()
        assert (await prompt(conn, session_id, f"second-{tag}", timeout=60)).stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == f"ECHO:second-{tag}"
        body = [r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]
        assert times_seen(body, tag, "first", "second") == [1, 1], "the model saw both prompts once"


async def test_acp_codex_tool_call_completes_with_its_output(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _codex_acp(pi_agent_dir, scripted_model, tmp_path, "tool") as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path / "work")
        answer = await prompt(conn, session_id, "Run echo hi", timeout=60)
        assert answer.stop_reason == "end_turn"
        tools = [u for u in recorder.of(session_id) if u.session_update in ("tool_call", "tool_call_update")]
        assert tools and tools[0].session_update == "tool_call"
        assert {u.tool_call_id for u in tools} == {tools[0].tool_call_id}
        assert tools[-1].status == "completed"
        assert "hi" in text_of(recorder.of(session_id))
