"""An ACP agent's conversation picked per session on the ACP front of a pi bridge
(`_meta.piBridge.agent`), closed and loaded again, and resumed by a bridge restarted on the same
state dir: pi-acp (driving the real pi) against the scripted model, judged from /proc, from the
editor's updates and from the requests the model received."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer
from tests.e2e.test_acp_agents import agent_env, agent_processes, requests_of, requires_acp_agents
from tests.support.acp import acp_bridge, prompt, text_of
from tests.support.env import WAIT, requires_pi
from tests.support.leaks import assert_no_run_processes
from tests.support.model_requests import times_seen

pytestmark = [requires_pi, requires_acp_agents, pytest.mark.realpi]

PI_ACP = {"piBridge": {"agent": "pi-acp"}}


def _pi_bridge(model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path, state: Path) -> Any:
    """`pi-bridge acp` whose own agent is pi, with pi-acp pointed at the scripted model's `echo`
    (pi's settings, in a copy of the agent dir) and the bridge's state in `state`."""
    agent_dir = tmp_path / "pi-agent"
    if not agent_dir.exists():
        shutil.copytree(pi_agent_dir, agent_dir, ignore=shutil.ignore_patterns("sessions"))
        (agent_dir / "settings.json").write_text(
            json.dumps({"defaultProvider": "fake", "defaultModel": "echo"})
        )
    env = agent_env(model, agent_dir, tmp_path / "claude-config")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    # no spare pi: the test's agent is pi-acp, which the server's spare never serves
    return acp_bridge(agent_dir, work, args=("--no-warm-pool",), extra_env={**env, STATE_DIR_ENV: str(state)})


async def _pi_acp_gone() -> None:
    """Wait (bounded) until no pi-acp process of this test is left."""
    deadline = time.monotonic() + WAIT
    while agent_processes("pi-acp"):
        assert time.monotonic() < deadline, "the closed session's pi-acp is still alive"
        await asyncio.sleep(0.05)


async def test_a_pi_acp_session_picked_on_a_pi_bridge_is_closed_then_loaded_on_pi_acp(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    tag, work = os.urandom(4).hex(), tmp_path / "work"
    state = Path(tempfile.mkdtemp(prefix="pi-bridge-acp-state-"))
    async with _pi_bridge(scripted_model, pi_agent_dir, tmp_path, state) as (conn, recorder, _):
        with pytest.raises(RequestError) as unknown:
            await conn.new_session(cwd=str(work), mcp_servers=[], piBridge={"agent": "no-such-agent"})
        assert unknown.value.code == -32602
        assert "_meta.piBridge.agent" in str(unknown.value) and "pi-acp" in str(unknown.value)

        opened = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[], **PI_ACP), WAIT)
        sid = opened.session_id
        [served] = agent_processes("pi-acp")  # the conversation's agent is a pi-acp process
        recorder.clear()
        assert (await prompt(conn, sid, f"one-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
        assert text_of(recorder.of(sid)) == f"ECHO:one-{tag}"
        assert agent_processes("pi-acp") == [served]

        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(work)), WAIT)
        assert [(s.title, s.field_meta) for s in listed.sessions if s.session_id == sid] == [
            (f"one-{tag}", {"live": True})
        ], "listed once, as pi-acp's (pi's files hold it too)"
        await asyncio.wait_for(conn.close_session(session_id=sid), WAIT)
        await _pi_acp_gone()
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(work)), WAIT)
        assert [s.field_meta for s in listed.sessions if s.session_id == sid] == [{"live": False}]

        recorder.clear()
        await asyncio.wait_for(conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[]), WAIT * 2)
        replayed = recorder.of(sid)
        assert text_of(replayed, "user_message_chunk") == f"one-{tag}", "the history arrives once"
        assert text_of(replayed) == f"ECHO:one-{tag}"
        [loaded] = agent_processes("pi-acp")
        assert loaded != served, "a new pi-acp process loaded it"

        recorder.clear()
        assert (await prompt(conn, sid, f"two-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
        assert text_of(recorder.of(sid)) == f"ECHO:two-{tag}", "nothing replayed again"
        assert agent_processes("pi-acp") == [loaded]
        last = requests_of(scripted_model, "echo")[-1]["body"]
        assert times_seen(last, tag, "one", "two") == [1, 1], "the model saw the earlier turn once"
    await assert_no_run_processes()


async def test_a_restarted_bridge_resumes_a_pi_acp_session_from_its_record(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    tag, work = os.urandom(4).hex(), tmp_path / "work"
    state = Path(tempfile.mkdtemp(prefix="pi-bridge-acp-state-"))
    async with _pi_bridge(scripted_model, pi_agent_dir, tmp_path, state) as (conn, _, _):
        opened = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[], **PI_ACP), WAIT)
        sid = opened.session_id
        assert (await prompt(conn, sid, f"one-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
    await assert_no_run_processes()

    async with _pi_bridge(scripted_model, pi_agent_dir, tmp_path, state) as (conn, recorder, _):
        await asyncio.wait_for(conn.resume_session(cwd=str(work), session_id=sid, mcp_servers=[]), WAIT * 2)
        chunks = ("user_message_chunk", "agent_message_chunk", "tool_call")
        assert [u for u in recorder.of(sid) if u.session_update in chunks] == [], "a resume replays nothing"
        [served] = agent_processes("pi-acp")
        assert (await prompt(conn, sid, f"two-{tag}", timeout=WAIT * 2)).stop_reason == "end_turn"
        assert text_of(recorder.of(sid)) == f"ECHO:two-{tag}"
        assert agent_processes("pi-acp") == [served], "the record's agent, pi-acp, serves it"
        last = requests_of(scripted_model, "echo")[-1]["body"]
        assert times_seen(last, tag, "one", "two") == [1, 1]

        # deleted, it leaves the record: no longer listed, and nothing loads it
        await asyncio.wait_for(conn._conn.send_request("session/delete", {"sessionId": sid}), WAIT)
        await _pi_acp_gone()
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(work)), WAIT)
        assert sid not in [s.session_id for s in listed.sessions]
        with pytest.raises(RequestError) as gone:
            await asyncio.wait_for(conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[]), WAIT)
        assert gone.value.code == -32002
        # the record's file is written off the loop, after the answer: wait for it (bounded)
        deadline = time.monotonic() + WAIT
        while True:
            kept = json.loads((state / "agent-sessions.json").read_text())["sessions"]
            marks = [e.get("deleted") for e in kept if e["sessionId"] == sid]
            if marks == [True] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert marks == [True]
    await assert_no_run_processes()
