"""`pi-bridge acp --agent claude` end to end: the ACP front over the real Claude Code 2.1.197
against the scripted model's Anthropic endpoint, through the official SDK's client.

An ACP session is a live conversation: one Claude Code process (stream-json both ways) serves
every prompt of it, started under the id session/new answers. The scenario is the model id;
Claude Code takes it from ANTHROPIC_MODEL, one bridge per scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from bridge.scripted_model import TEXT_REPLY, ScriptedModelServer
from bridge.scripted_model.scenarios import WRITE_CONTENT, WRITE_FILE
from tests.support.acp import acp_bridge, choose, new_session, prompt, retry_notes, text_of
from tests.support.env import CLAUDE_BIN, PI_BIN, WAIT, claude_stored, requires_claude
from tests.support.leaks import assert_no_run_processes, run_processes, wait_for_run_process
from tests.support.model_requests import times_seen

pytestmark = [requires_claude, pytest.mark.realpi]


def _claude_env(model: ScriptedModelServer, config_dir: Path, scenario: str) -> dict[str, str]:
    """Claude Code on PATH, pointed at the scripted model's scenario, its state in `config_dir`."""
    return {
        "PATH": os.pathsep.join([str(CLAUDE_BIN.parent), str(PI_BIN), os.environ.get("PATH", "")]),
        "ANTHROPIC_BASE_URL": model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "ANTHROPIC_MODEL": scenario,
    }


def _claude_acp(
    pi_agent_dir: Path, model: ScriptedModelServer, tmp_path: Path, scenario: str, *args: str
) -> Any:
    """`pi-bridge acp --agent claude ARGS` with Claude Code on scripted scenario `scenario`."""
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir(exist_ok=True)
    return acp_bridge(
        pi_agent_dir,
        _workdir(tmp_path),
        args=("--agent", "claude", *args),
        extra_env=_claude_env(model, config_dir, scenario),
    )


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return work


def _requests_of(model: ScriptedModelServer, scenario: str) -> list[dict[str, Any]]:
    return [r for r in model.requests if r["model"] == scenario]


async def test_acp_claude_streams_the_answer_and_names_the_session_claude_stored(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "text") as (conn, recorder, _):
        session_id = await new_session(conn, _workdir(tmp_path))
        assert uuid.UUID(session_id), "Claude Code names sessions by UUID"
        answer = await prompt(conn, session_id, "Say hello")
        updates = recorder.of(session_id)
        chunks = [u for u in updates if u.session_update == "agent_message_chunk"]
        assert answer.stop_reason == "end_turn"
        assert len(chunks) > 3, "the answer streams in pieces"
        assert text_of(updates) == TEXT_REPLY
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(_workdir(tmp_path))), WAIT)
        assert session_id in [s.session_id for s in listed.sessions], "the session is Claude Code's own"
    await assert_no_run_processes()


async def test_acp_claude_bash_tool_is_a_tool_call_completed_with_its_output(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "tool") as (conn, recorder, _):
        session_id = await new_session(conn, _workdir(tmp_path))
        answer = await prompt(conn, session_id, "Run echo hi")
        assert answer.stop_reason == "end_turn"
        tool_updates = [
            u for u in recorder.of(session_id) if u.session_update in ("tool_call", "tool_call_update")
        ]
        assert tool_updates and tool_updates[0].session_update == "tool_call"
        assert {u.tool_call_id for u in tool_updates} == {tool_updates[0].tool_call_id}
        assert tool_updates[-1].status == "completed"
        assert tool_updates[-1].content[0].content.text.strip() == "hi"
        assert "hi" in text_of(recorder.of(session_id))


async def test_acp_claude_cancel_mid_tool_answers_cancelled_after_the_tree_is_gone(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "toolslow") as (conn, recorder, process):
        session_id = await new_session(conn, _workdir(tmp_path))
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        sleeper = await wait_for_run_process("sleep 30")
        await conn.cancel(session_id=session_id)
        answer = await asyncio.wait_for(running, WAIT)
        assert answer.stop_reason == "cancelled"
        assert not (sleeper.is_running() and sleeper.status() != psutil.STATUS_ZOMBIE), (
            "the tool's sleep is gone when the prompt answers cancelled"
        )
        kept = _claude_serving(process.pid, session_id)  # the conversation's, alive on purpose
        assert [p for p in run_processes() if p.pid not in kept] == [], "nothing of the prompt is left"


async def test_acp_claude_second_prompt_resumes_the_session_and_the_model_sees_the_first(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    marker = f"first prompt {os.urandom(4).hex()}"
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "echo") as (conn, recorder, _):
        session_id = await new_session(conn, _workdir(tmp_path))
        first = await prompt(conn, session_id, marker)
        assert first.stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == f"ECHO:{marker}"
        recorder.clear()
        second = await prompt(conn, session_id, "and now?")
        assert second.stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == "ECHO:and now?"
        seen = str(_requests_of(scripted_model, "echo")[-1]["body"]["messages"])
        assert marker in seen and "and now?" in seen, "the model saw both prompts"


async def test_acp_claude_retry_is_visible_and_stays_in_the_session_its_first_attempt_named(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    scripted_model.reset()
    bridge = _claude_acp(pi_agent_dir, scripted_model, tmp_path, "flaky", "--retry-attempts", "3")
    async with bridge as (conn, recorder, _):
        session_id = await new_session(conn, _workdir(tmp_path))
        answer = await prompt(conn, session_id, "eventually")
        assert (answer.stop_reason, answer.field_meta["piBridge"]["attempts"]) == ("end_turn", 3)
        assert retry_notes(recorder.of(session_id)) == [2, 3], "each retry is announced"
        assert len(_requests_of(scripted_model, "flaky")) == 3, "each attempt reached the model once"
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(_workdir(tmp_path))), WAIT)
        assert [s.session_id for s in listed.sessions] == [session_id], "one session, kept by the retries"


async def test_acp_claude_a_retried_prompt_is_seen_once_with_the_turns_before_it(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    scripted_model.reset()  # flaky: two failures, then an answer
    bridge = _claude_acp(pi_agent_dir, scripted_model, tmp_path, "flaky", "--retry-attempts", "3")
    async with bridge as (conn, _, _):
        session_id = await new_session(conn, _workdir(tmp_path))
        first = await prompt(conn, session_id, f"first-{tag}")
        assert (first.stop_reason, first.field_meta["piBridge"]["attempts"]) == ("end_turn", 3)
        seen = [times_seen(r["body"], tag, "first") for r in _requests_of(scripted_model, "flaky")]
        assert seen == [[1]] * 3, "the session's first prompt, once in each attempt"
        scripted_model.reset()
        second = await prompt(conn, session_id, f"second-{tag}")
        assert (second.stop_reason, second.field_meta["piBridge"]["attempts"]) == ("end_turn", 3)
        seen = [times_seen(r["body"], tag, "first", "second") for r in _requests_of(scripted_model, "flaky")]
        assert seen == [[1, 1]] * 3, "the earlier turn and the prompt, once in each attempt"
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(_workdir(tmp_path))), WAIT)
        assert [s.session_id for s in listed.sessions] == [session_id]


def _claude_serving(bridge_pid: int, session_id: str) -> list[int]:
    """The top-level Claude Code processes under the bridge started for `session_id`."""
    found = []
    for child in psutil.Process(bridge_pid).children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if "--input-format" in argv and session_id in argv:
            found.append(child.pid)
    return found


async def test_acp_claude_three_prompts_of_a_session_run_on_one_process(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "echo") as (conn, recorder, process):
        session_id = await new_session(conn, _workdir(tmp_path))
        serving, took = [], []
        for turn in ("one", "two", "three"):
            recorder.clear()
            started = time.monotonic()
            answer = await prompt(conn, session_id, turn)
            took.append(time.monotonic() - started)
            assert answer.stop_reason == "end_turn" and text_of(recorder.of(session_id)) == f"ECHO:{turn}"
            serving.append(_claude_serving(process.pid, session_id))
        assert len(serving[0]) == 1 and serving == [serving[0]] * 3, serving
        assert max(took[1:]) < 3.0, f"a follow-up's whole turn took {max(took[1:]):.2f} s"
        seen = str(_requests_of(scripted_model, "echo")[-1]["body"]["messages"])
        assert all(turn in seen for turn in ("one", "two", "three"))


async def test_acp_claude_lists_claude_codes_models_and_switches_between_prompts(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "echo") as (conn, recorder, process):
        session = await asyncio.wait_for(conn.new_session(cwd=str(_workdir(tmp_path)), mcp_servers=[]), WAIT)
        (model_option,) = [o for o in session.config_options or [] if o.id == "model"]
        values = [choice.value for choice in model_option.options]
        assert model_option.current_value == "anthropic/echo", "the model it runs (ANTHROPIC_MODEL)"
        assert {"anthropic/default", "anthropic/sonnet", "anthropic/haiku"} <= set(values), values
        first = await prompt(conn, session.session_id, "hello")
        assert first.stop_reason == "end_turn" and text_of(recorder.of(session.session_id)) == "ECHO:hello"
        serving = _claude_serving(process.pid, session.session_id)
        await conn.set_config_option(
            config_id="model", session_id=session.session_id, value="anthropic/haiku"
        )
        with contextlib.suppress(Exception):  # the scripted model has no such model: a 404 fails the turn
            await prompt(conn, session.session_id, "and now?")
        asked = [r["model"] for r in scripted_model.requests]
        assert asked[-1].startswith("claude-haiku"), "the next turn ran on the model chosen"
        assert _claude_serving(process.pid, session.session_id) == serving, "set_model, not a respawn"


# --------------------------------------------------------------------------- approvals on a live Claude Code


def _tool_ends(recorder: Any, session_id: str) -> list[Any]:
    return [
        u
        for u in recorder.of(session_id)
        if u.session_update == "tool_call_update" and u.status in ("completed", "failed")
    ]


async def test_acp_claude_a_rejected_write_never_runs_and_allow_always_answers_the_next(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    work = _workdir(tmp_path)
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "write") as (conn, recorder, _):
        session_id = await new_session(conn, work)
        recorder.answer = choose("reject_once")
        assert (await prompt(conn, session_id, "write it")).stop_reason == "end_turn"
        [asked] = recorder.permission_requests
        assert asked.tool_call.kind == "edit" and asked.tool_call.title, asked.tool_call
        [diff] = [c for c in asked.tool_call.content or [] if getattr(c, "type", None) == "diff"]
        assert diff.new_text == WRITE_CONTENT and diff.old_text is None, "a new file: no old text"
        assert [end.status for end in _tool_ends(recorder, session_id)] == ["failed"]
        assert not (work / WRITE_FILE).exists(), "the rejected write never ran"
        recorder.answer = choose("allow_always")
        assert (await prompt(conn, session_id, "write it")).stop_reason == "end_turn"
        assert (work / WRITE_FILE).read_text() == WRITE_CONTENT
        (work / WRITE_FILE).unlink()
        recorder.answer = choose("reject_once")
        assert (await prompt(conn, session_id, "write it")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 2, "the rule answered the third write"
        assert (work / WRITE_FILE).read_text() == WRITE_CONTENT


@pytest.mark.parametrize("kind", ["allow_once", "reject_once"])
async def test_acp_claude_a_command_that_changes_files_runs_only_when_approved(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path, kind: str
) -> None:
    work = _workdir(tmp_path)
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "toolcompound") as (conn, recorder, _):
        recorder.answer = choose(kind)
        session_id = await new_session(conn, work)
        assert (await prompt(conn, session_id, "run it")).stop_reason == "end_turn"
        [asked] = recorder.permission_requests
        assert asked.tool_call.kind == "execute"
        assert (work / "compound.txt").exists() is (kind == "allow_once")


async def test_acp_claude_plan_mode_refuses_the_write_without_asking(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    work = _workdir(tmp_path)
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "write") as (conn, recorder, _):
        session_id = await new_session(conn, work)
        await asyncio.wait_for(conn.set_session_mode(mode_id="plan", session_id=session_id), WAIT)
        assert (await prompt(conn, session_id, "write it")).stop_reason == "end_turn"
        assert recorder.permission_requests == [], "plan refuses: nothing is put to the user"
        assert [end.status for end in _tool_ends(recorder, session_id)] == ["failed"]
        assert not (work / WRITE_FILE).exists(), "plan mode changed nothing"


async def test_acp_claude_a_process_killed_between_prompts_is_resumed_by_the_next(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "echo") as (conn, recorder, process):
        session_id = await new_session(conn, _workdir(tmp_path))
        assert (await prompt(conn, session_id, f"before-{tag}")).stop_reason == "end_turn"
        [pid] = _claude_serving(process.pid, session_id)
        await claude_stored(tmp_path / "claude-config", session_id, f"ECHO:before-{tag}")
        claude = psutil.Process(pid)
        claude.kill()
        claude.wait(WAIT)
        recorder.clear()
        assert (await prompt(conn, session_id, f"after-{tag}")).stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == f"ECHO:after-{tag}"
        [new_pid] = _claude_serving(process.pid, session_id)
        assert new_pid != pid
        seen = str(_requests_of(scripted_model, "echo")[-1]["body"]["messages"])
        assert f"before-{tag}" in seen and f"after-{tag}" in seen, "the new process resumed the session"
