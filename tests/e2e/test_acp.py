"""`pi-bridge acp` end to end through the official Python SDK's client, against the real pi 1.6.0
and the scripted model: streaming, thoughts, tools, diffs, errors, cancel, history, options."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp import RequestError, schema

from bridge.scripted_model import (
    EDIT_FILE,
    EDIT_NEW,
    EDIT_OLD,
    EDIT_ORIGINAL,
    TEXT_REPLY,
    ScriptedModelServer,
)
from tests.support.acp import AcpRecorder, RawAcp, acp_bridge, new_session, prompt, text_of
from tests.support.env import ROOT, WAIT, requires_pi
from tests.support.leaks import agents_under, no_run_processes, run_processes
from tests.support.model_requests import PIXEL_PNG, image_urls

FAKE_RPC_PI = ROOT / "tests" / "fakes" / "fake_rpc_pi.py"

pytestmark = [requires_pi]


def _user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            texts.append(str(content))
    return texts


async def _sleep_processes(timeout: float = WAIT) -> list[psutil.Process]:
    """The run's `sleep 30` (waits until bash has started it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in run_processes() if p.name() == "sleep"]
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("bash never started `sleep 30`")


async def test_acp_streams_the_answer_as_message_chunks_with_no_banner(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path)
        answer = await prompt(conn, session_id, "Say hello")
        updates = recorder.of(session_id)
        chunks = [u for u in updates if u.session_update == "agent_message_chunk"]
        assert answer.stop_reason == "end_turn"
        assert len(chunks) > 3, "the answer streams in pieces"
        assert text_of(updates) == TEXT_REPLY, "nothing but the answer: no banner, no version line"
        usage = [u for u in updates if u.session_update == "usage_update"]
        assert usage and usage[-1].size > 0 and usage[-1].used > 0


async def test_acp_an_image_in_the_prompt_reaches_the_model(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        initialized = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        assert initialized.agent_capabilities.prompt_capabilities.image is True
        session_id = await new_session(conn, tmp_path, "echo")
        tag = os.urandom(4).hex()
        blocks: list[Any] = [
            schema.TextContentBlock(type="text", text=f"what is in it {tag}"),
            schema.ImageContentBlock(type="image", data=PIXEL_PNG, mime_type="image/png"),
        ]
        answer = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=blocks), WAIT)
        assert answer.stop_reason == "end_turn"
        bodies = [r["body"] for r in scripted_model.requests if r["body"] and tag in str(r["body"])]
        assert bodies, "the prompt reached the model"
        assert image_urls(bodies[-1]) == [f"data:image/png;base64,{PIXEL_PNG}"], "with its image, as sent"


async def test_acp_an_image_that_is_not_base64_is_an_invalid_params_error(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        session_id = await new_session(conn, tmp_path, "echo")
        blocks: list[Any] = [
            schema.TextContentBlock(type="text", text="look"),
            schema.ImageContentBlock(type="image", data="not base64!", mime_type="image/png"),
        ]
        with pytest.raises(RequestError) as refused:
            await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=blocks), WAIT)
        assert refused.value.code == -32602 and "prompt[1]" in str(refused.value), refused.value
        assert (await prompt(conn, session_id, "still here")).stop_reason == "end_turn"


async def test_acp_new_session_answers_pi_session_id_and_its_models(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[]), WAIT)
        options = {
            option.root.id if hasattr(option, "root") else option.id: option
            for option in session.config_options or []
        }
        assert options["model"].current_value == "fake/text"
        assert "fake/tool" in [choice.value for choice in options["model"].options]
        assert "thought_level" in options
        await prompt(conn, session.session_id, "hi")
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(tmp_path)), WAIT)
        assert [s.session_id for s in listed.sessions] == [session.session_id], "the id is pi's session id"


async def test_acp_streams_thoughts_live_before_the_answer(pi_agent_dir: Path, tmp_path: Path) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "thinking")
        answer = await prompt(conn, session_id, "Think first")
        updates = recorder.of(session_id)
        kinds = [u.session_update for u in updates]
        assert answer.stop_reason == "end_turn"
        assert "agent_thought_chunk" in kinds and text_of(updates, "agent_thought_chunk").strip()
        assert kinds.index("agent_thought_chunk") < kinds.index("agent_message_chunk")


async def test_acp_bash_tool_goes_pending_in_progress_with_output_completed(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "tool")
        await prompt(conn, session_id, "Run echo hi")
        tool_updates = [
            u for u in recorder.of(session_id) if u.session_update in ("tool_call", "tool_call_update")
        ]
        start = tool_updates[0]
        assert start.session_update == "tool_call"
        assert (start.kind, start.title, start.status) == ("execute", "echo hi", "pending")
        assert {u.tool_call_id for u in tool_updates} == {start.tool_call_id}
        statuses = [u.status for u in tool_updates]
        assert statuses[-1] == "completed" and "in_progress" in statuses
        progress = [u for u in tool_updates if u.status == "in_progress" and u.content]
        assert progress and progress[-1].content[0].content.text.strip() == "hi"
        assert tool_updates[-1].content[0].content.text.strip() == "hi"


async def test_acp_edit_carries_its_diff(pi_agent_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL)
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "edit")
        await prompt(conn, session_id, "Edit the notes")
        updates = recorder.of(session_id)
        start = next(u for u in updates if u.session_update == "tool_call")
        assert start.kind == "edit" and start.title == EDIT_FILE
        assert start.locations and start.locations[0].path == str(target)
        done = [u for u in updates if u.session_update == "tool_call_update" and u.status == "completed"]
        diffs = [c for c in done[-1].content if isinstance(c, schema.FileEditToolCallContent)]
        assert len(diffs) == 1
        assert diffs[0].path == str(target)
        assert diffs[0].old_text == EDIT_ORIGINAL
        assert diffs[0].new_text == EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW) == target.read_text()


async def test_acp_model_error_answers_a_json_rpc_error_with_kind_and_retryable(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        session_id = await new_session(conn, tmp_path, "err500")
        with pytest.raises(RequestError) as failure:
            await prompt(conn, session_id, "fail please")
        error = failure.value
        assert isinstance(error.data, dict)
        assert error.code == -32000
        assert str(error) and "500" in str(error)
        assert error.data["kind"] == "server" and error.data["retryable"] is True
        assert "stderr" in error.data
        # the connection and the session keep serving
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/text")
        assert (await prompt(conn, session_id, "now answer")).stop_reason == "end_turn"


async def test_acp_retry_from_initialize_meta_shows_each_attempt(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    scripted_model.reset()
    async with acp_bridge(pi_agent_dir, tmp_path, args=("--retry-attempts", "3")) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "flaky")
        answer = await prompt(conn, session_id, "eventually")
        notes = [
            u for u in recorder.of(session_id) if u.session_update == "agent_message_chunk" and u.field_meta
        ]
        assert answer.stop_reason == "end_turn"
        assert [n.field_meta["piBridge"]["retrying"]["attempt"] for n in notes] == [2, 3]
        assert answer.field_meta["piBridge"]["attempts"] == 3


async def test_acp_cancel_mid_tool_answers_cancelled_after_the_tree_is_gone(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "toolslow")
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        sleepers = await _sleep_processes()
        await conn.cancel(session_id=session_id)
        answer = await asyncio.wait_for(running, WAIT)
        assert answer.stop_reason == "cancelled"
        assert not [p.pid for p in sleepers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], (
            "the tool's sleep is gone when the prompt answers cancelled"
        )
        # the session serves the next prompt
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/text")
        assert (await prompt(conn, session_id, "again")).stop_reason == "end_turn"


async def test_acp_second_prompt_sees_the_first_and_queued_prompts_answer_in_order(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        session_id = await new_session(conn, tmp_path, "echo")
        tag = os.urandom(4).hex()
        first = asyncio.ensure_future(prompt(conn, session_id, f"first-{tag}"))
        second = asyncio.ensure_future(prompt(conn, session_id, f"second-{tag}"))
        done_order: list[str] = []
        first.add_done_callback(lambda _: done_order.append("first"))
        second.add_done_callback(lambda _: done_order.append("second"))
        await asyncio.wait_for(asyncio.gather(first, second), WAIT)
        assert done_order == ["first", "second"]
        bodies = [r["body"] for r in scripted_model.requests if r["model"] == "echo" and r["body"]]
        last = next(b for b in reversed(bodies) if any(f"second-{tag}" in t for t in _user_texts(b)))
        assert any(f"first-{tag}" in t for t in _user_texts(last)), "the model sees the first prompt"


async def test_acp_set_model_applies_from_the_next_prompt(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        session_id = await new_session(conn, tmp_path)
        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="fake/echo")
        model = next(o for o in changed.config_options if o.id == "model")
        assert model.current_value == "fake/echo"
        tag = os.urandom(4).hex()
        await prompt(conn, session_id, f"which model {tag}")
        assert any(
            r["model"] == "echo" and any(tag in t for t in _user_texts(r["body"]))
            for r in scripted_model.requests
            if r["body"]
        )
        with pytest.raises(RequestError) as bad:
            await conn.set_config_option(config_id="model", session_id=session_id, value="nope/none")
        assert bad.value.code == -32602


async def test_acp_load_in_a_fresh_bridge_replays_what_was_streamed(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "tool")
        await prompt(conn, session_id, "Run echo hi")
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/text")
        await prompt(conn, session_id, "And say hello")
        streamed = recorder.of(session_id)
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(tmp_path)), WAIT)
        assert [s.session_id for s in listed.sessions] == [session_id]
        assert listed.sessions[0].title and listed.sessions[0].updated_at
        await asyncio.wait_for(
            conn.load_session(cwd=str(tmp_path), session_id=session_id, mcp_servers=[]), WAIT
        )
        replayed = recorder.of(session_id)
        assert text_of(replayed, "user_message_chunk") == "Run echo hiAnd say hello"
        assert text_of(replayed) == text_of(streamed)
        starts = [(u.tool_call_id, u.title, u.kind) for u in streamed if u.session_update == "tool_call"]
        assert [
            (u.tool_call_id, u.title, u.kind) for u in replayed if u.session_update == "tool_call"
        ] == starts
        ends = [u for u in replayed if u.session_update == "tool_call_update"]
        assert [u.status for u in ends] == ["completed"] and ends[0].content[0].content.text.strip() == "hi"
        # the loaded session goes on
        recorder.clear()
        assert (await prompt(conn, session_id, "more")).stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == TEXT_REPLY


async def test_acp_load_of_an_unknown_session_is_an_error(pi_agent_dir: Path, tmp_path: Path) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        with pytest.raises(RequestError) as missing:
            await conn.load_session(cwd=str(tmp_path), session_id="no-such-session", mcp_servers=[])
        assert missing.value.code == -32002
        with pytest.raises(RequestError) as unknown:
            await prompt(conn, "no-such-session", "hello?")
        assert unknown.value.code == -32002 and "session/new" in str(unknown.value)


async def test_acp_close_session_ends_its_live_pi(pi_agent_dir: Path, tmp_path: Path) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, process):
        session_id = await new_session(conn, tmp_path)
        await prompt(conn, session_id, "hi")
        before = agents_under(process.pid)
        await asyncio.wait_for(conn.close_session(session_id=session_id), WAIT)
        after = agents_under(process.pid)
        assert len(before - after) == 1, "the session's pi is gone (a spare, if any, stays)"
        with pytest.raises(RequestError):
            await prompt(conn, session_id, "still there?")


@pytest.mark.parametrize("how", ["eof", "sigterm"])
async def test_acp_end_of_input_or_sigterm_mid_prompt_leaves_nothing(
    pi_agent_dir: Path, tmp_path: Path, how: str
) -> None:
    recorder: AcpRecorder
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, process):
        session_id = await new_session(conn, tmp_path, "toolslow")
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        await _sleep_processes()
        if how == "eof":
            assert process.stdin is not None
            process.stdin.close()
        else:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), WAIT) == 0
        running.cancel()
    no_run_processes(timeout=3, where=f"after {how} mid-prompt")


async def test_acp_pi_steer_extension_hands_the_running_prompt_a_message(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "toolslow")
        idle = await conn.ext_method("pi/steer", {"sessionId": session_id, "message": "too early"})
        assert idle == {"accepted": False, "reason": "no prompt of this session is running"}
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        steered = await asyncio.wait_for(
            conn.ext_method("pi/steer", {"sessionId": session_id, "message": "stop sleeping"}), WAIT
        )
        assert steered["accepted"] is True, steered
        await conn.cancel(session_id=session_id)
        assert (await asyncio.wait_for(running, WAIT)).stop_reason == "cancelled"


async def test_acp_a_pi_killed_mid_prompt_answers_an_error_and_the_session_goes_on(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, bridge):
        session_id = await new_session(conn, tmp_path, "toolslow")
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        sleeper = (await _sleep_processes())[0]
        pi = next(p for p in sleeper.parents() if p.ppid() == bridge.pid)  # the session's live pi
        pi.kill()
        with pytest.raises(RequestError) as failure:
            await asyncio.wait_for(running, WAIT)
        assert failure.value.code == -32000
        assert isinstance(failure.value.data, dict) and failure.value.data["kind"] == "process"
        assert failure.value.data["retryable"] is True
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/text")
        assert (await prompt(conn, session_id, "again")).stop_reason == "end_turn"


async def test_acp_lines_pi_prints_that_are_not_events_never_become_chunks(tmp_path: Path) -> None:
    fake = f"{sys.executable} {FAKE_RPC_PI} --model garbage"
    async with acp_bridge(tmp_path, tmp_path, top_args=("--pi-command", fake)) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path)
        answer = await prompt(conn, session_id, "hello")
        assert answer.stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == "Hello from the fake rpc pi.", "no line of garbage in it"


def test_acp_frames_sent_back_to_back_take_effect_in_the_order_they_came(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    """A prompt written right behind a model change, in one write, runs on the new model: the
    prompt served as its frame is read must not overtake a frame still on its way to its handler."""
    raw = RawAcp(pi_agent_dir, tmp_path)
    try:
        session_id = _raw_session(raw, tmp_path)
        tag = os.urandom(4).hex()
        _send_together(
            raw, [_model_change(session_id, "fake/echo", 1), _prompt_frame(session_id, f"order {tag}", 2)]
        )
        answer = raw.wait(lambda f: f.get("id") == 2 and "method" not in f)
        assert answer.get("result", {}).get("stopReason") == "end_turn", answer
        models = [
            r["model"]
            for r in scripted_model.requests
            if r["body"] and any(tag in t for t in _user_texts(r["body"]))
        ]
        assert models == ["echo"], models
    finally:
        assert raw.close() == 0
    no_run_processes(timeout=3, where="after the back-to-back frames")


def test_acp_a_cancel_right_behind_a_prompt_still_on_its_way_to_its_handler_cancels_it(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """A cancel is served whole as its frame is read only when no earlier frame waits for its
    handler: here the prompt ahead of it is still on its way (a model change is ahead of that),
    and the cancel must reach it once it runs, not be spent on a session with nothing running."""
    raw = RawAcp(pi_agent_dir, tmp_path)
    try:
        session_id = _raw_session(raw, tmp_path)
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
        _send_together(
            raw,
            [_model_change(session_id, "fake/toolslow", 1), _prompt_frame(session_id, "sleep", 2), cancel],
        )
        answer = raw.wait(lambda f: f.get("id") == 2 and "method" not in f)
        assert answer.get("result", {}).get("stopReason") == "cancelled", answer
    finally:
        assert raw.close() == 0
    no_run_processes(timeout=3, where="after the prompt cancelled on its way")


def _raw_session(raw: RawAcp, cwd: Path) -> str:
    """Initialize and open a session over the raw connection; its id."""
    assert raw.request("initialize", {"protocolVersion": 1})["result"]
    return str(raw.request("session/new", {"cwd": str(cwd), "mcpServers": []})["result"]["sessionId"])


def _model_change(session_id: str, model: str, msg_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "session/set_config_option",
        "params": {"sessionId": session_id, "configId": "model", "value": model},
    }


def _prompt_frame(session_id: str, text: str, msg_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
    }


def _send_together(raw: RawAcp, frames: list[dict[str, Any]]) -> None:
    """The frames in one write: the bridge reads them in one callback."""
    raw.send_line(b"\n".join(json.dumps(frame).encode() for frame in frames))
