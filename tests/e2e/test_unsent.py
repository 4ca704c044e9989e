"""A stopped run leaves nothing behind it: its steers and the runs queued behind it never reach
the model later, and the cancel's answer hands their texts back (`unsent`). Real pi, scripted model."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.conftest import requires_pi
from tests.e2e.test_conversations import turn, user_texts
from tests.support.acp import acp_bridge, new_session, prompt
from tests.support.env import WAIT
from tests.support.lsp import answer_or_error, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

REQUEST_CANCELLED = -32800


def every_user_text(model: ScriptedModelServer) -> str:
    """Every user message of every request the scripted model was sent, as one text."""
    return "\n".join(text for seen in model.requests if seen["body"] for text in user_texts(seen["body"]))


def slow_run(run_id: str, prompt: str, cwd: Path, session_id: str) -> dict[str, Any]:
    """pi/run params of a run that streams slowly (~30 s) in the conversation `session_id`."""
    return {
        "runId": run_id,
        "prompt": prompt,
        "provider": "fake",
        "model": "slow",
        "cwd": str(cwd),
        "sessionId": session_id,
    }


async def cancelled_data(task: Any) -> dict[str, Any]:
    """The -32800 error's data that answers a cancelled pi/run."""
    result, error = await answer_or_error(task)
    assert result is None and error is not None, result
    assert error.code == REQUEST_CANCELLED, error
    data: dict[str, Any] = error.data
    assert data["status"] == "cancelled"
    return data


async def test_a_steer_of_a_stopped_run_never_reaches_the_next_prompt(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"start-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    run_id = f"stopped-{tag}"
    _, task = start_request(real_bridge, "pi/run", slow_run(run_id, f"divide-{tag}", tmp_path, sid))
    await messages_of(real_bridge).wait_type(run_id, "assistant")
    steer = f"Focus on division by zero only {tag}"
    answer = await request(real_bridge, "pi/steer", {"runId": run_id, "message": steer})
    assert answer == {"runId": run_id, "accepted": True}

    cancel = await request(real_bridge, "pi/cancel", {"runId": run_id})
    assert cancel["found"] is True and cancel["unsent"] == [steer]
    data = await cancelled_data(task)
    assert data["unsent"] == [steer]
    assert data["shutdown"]["agentKept"] is True, "the steer is cleared from the live pi, not killed with it"
    stopped = messages_of(real_bridge).by_run[run_id]
    assert_stream_invariants(stopped)
    assert not [m for m in stopped if m["type"] == "run.steered"]

    again, _ = await turn(real_bridge, f"Hello again {tag}", cwd=str(tmp_path), sessionId=sid)
    assert again["status"] == "completed" and again["text"] == f"ECHO:Hello again {tag}"
    assert not [m for m in messages_of(real_bridge).by_run[again["runId"]] if m["type"] == "run.steered"]
    [hello] = [r for r in scripted_model.requests if f"Hello again {tag}" in every_text(r)]
    assert user_texts(hello["body"])[-1] == f"Hello again {tag}"
    assert steer not in every_user_text(scripted_model), "the steer reached the model"


async def test_a_run_queued_behind_a_stopped_run_is_stopped_across_two_stops(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"start-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]

    running, queued = f"running-{tag}", f"queued-{tag}"
    _, running_task = start_request(real_bridge, "pi/run", slow_run(running, f"long-{tag}", tmp_path, sid))
    await messages_of(real_bridge).wait_type(running, "assistant")
    later = f"summarize when done {tag}"
    queued_params = {**slow_run(queued, later, tmp_path, sid), "model": "echo"}
    _, queued_task = start_request(real_bridge, "pi/run", queued_params)
    waiting = await messages_of(real_bridge).wait_type(queued, "run.queued")
    assert waiting["content"]["reason"] == "session"

    cancel = await request(real_bridge, "pi/cancel", {"runId": running})
    assert cancel["unsent"] == [later]
    assert (await cancelled_data(running_task))["unsent"] == [later]
    behind = await cancelled_data(queued_task)
    assert behind["shutdown"]["pids"] == [] and "unsent" not in behind

    # The second Stop: a new run of the conversation, stopped with nothing to hand back.
    second = f"second-{tag}"
    _, second_task = start_request(real_bridge, "pi/run", slow_run(second, f"more-{tag}", tmp_path, sid))
    await messages_of(real_bridge).wait_type(second, "assistant")
    cancel = await request(real_bridge, "pi/cancel", {"runId": second})
    assert cancel["found"] is True and "unsent" not in cancel
    assert "unsent" not in await cancelled_data(second_task)

    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["text"] == f"ECHO:after-{tag}"
    assert later not in every_user_text(scripted_model), "the queued prompt reached the model"


def every_text(seen: dict[str, Any]) -> str:
    """A model request's user messages, as one text."""
    return "\n".join(user_texts(seen["body"])) if seen["body"] else ""


async def test_acp_session_cancel_hands_the_steer_back_and_the_next_prompt_has_none_of_it(
    pi_agent_dir: Path, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    tag = os.urandom(4).hex()
    steer = f"Focus on division by zero only {tag}"
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "slow")
        running = asyncio.ensure_future(prompt(conn, session_id, f"divide-{tag}"))
        await recorder.wait_for(lambda u: u.session_update == "agent_message_chunk")
        steered = await asyncio.wait_for(
            conn.ext_method("pi/steer", {"sessionId": session_id, "message": steer}), WAIT
        )
        assert steered["accepted"] is True, steered
        await conn.cancel(session_id=session_id)
        answer = await asyncio.wait_for(running, WAIT)
        assert answer.stop_reason == "cancelled"
        assert answer.field_meta == {"piBridge": {"unsent": [steer]}}
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/echo")
        again = await asyncio.wait_for(prompt(conn, session_id, f"Hello again {tag}"), WAIT)
        assert again.stop_reason == "end_turn"
    [hello] = [r for r in scripted_model.requests if f"Hello again {tag}" in every_text(r)]
    assert user_texts(hello["body"])[-1] == f"Hello again {tag}"
    assert steer not in every_user_text(scripted_model), "the steer reached the model"
