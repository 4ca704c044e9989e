"""Live conversations with the real pi (the rpc engine): turns, cancel, kills, retry, steering."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.conftest import bridge_config, requires_pi
from tests.support.leaks import wait_for_run_process
from tests.support.lsp import answer_or_error, initialize, messages_of, request, start_request
from tests.support.model_requests import PIXEL_PNG, image_urls
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user messages' texts of one model request, in order."""
    texts: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        texts.append(str(content))
    return texts


def requests_with(model: ScriptedModelServer, marker: str) -> list[dict[str, Any]]:
    """The recorded model requests whose last user message contains `marker`."""
    return [r for r in model.requests if r["body"] and marker in (user_texts(r["body"]) or [""])[-1]]


async def turn(
    client: LanguageClient, prompt: str, **params: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = await request(
        client, "pi/run", {"prompt": prompt, "provider": "fake", "model": "echo", **params}
    )
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def live_pid(client: LanguageClient, session_id: str) -> int:
    live = (await request(client, "pi/runs", None))["live"]
    pids = [entry["pid"] for entry in live if entry["sessionId"] == session_id]
    assert pids, f"session {session_id} has no live pi: {live}"
    return int(pids[0])


async def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        await asyncio.sleep(0.02)


async def test_third_turn_request_holds_turns_one_and_two_once_each(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, messages = await turn(real_bridge, f"one-{tag}", cwd=str(tmp_path))
    assert messages[0]["type"] == "session.started"
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    second, messages = await turn(real_bridge, f"two-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert messages[0]["type"] == "session.resumed" and second["sessionId"] == sid
    third, _ = await turn(real_bridge, f"three-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert third["text"] == f"ECHO:three-{tag}"
    assert await live_pid(real_bridge, sid) == pid, "one live pi served all three turns"
    [request_three] = requests_with(scripted_model, f"three-{tag}")
    assert user_texts(request_three["body"]) == [f"one-{tag}", f"two-{tag}", f"three-{tag}"]
    terminal = messages_of(real_bridge).by_run[third["runId"]][-1]
    usage = terminal["content"]["contextUsage"]
    assert usage["contextWindow"] > 0 and usage["tokens"] > 0 and usage["percent"] > 0
    assert "sessionCost" in terminal["content"]


async def test_follow_up_after_a_cancel_mid_tool_keeps_the_live_pi(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"start-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    run_id = f"cancel-{tag}"
    _, task = start_request(
        real_bridge,
        "pi/run",
        {
            "runId": run_id,
            "prompt": "go",
            "provider": "fake",
            "model": "toolslow",
            "cwd": str(tmp_path),
            "sessionId": sid,
        },
    )
    await messages_of(real_bridge).wait_type(run_id, "tool.update")
    sleeper = await wait_for_run_process("sleep 30")
    cancelled = await request(real_bridge, "pi/cancel", {"runId": run_id})
    receipt = cancelled["shutdown"]
    assert receipt["survivors"] == [] and receipt["agentKept"] is True
    assert not psutil.pid_exists(sleeper.pid) or sleeper.status() == psutil.STATUS_ZOMBIE
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled"
    assert_stream_invariants(messages_of(real_bridge).by_run[run_id])
    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["text"] == f"ECHO:after-{tag}"
    assert await live_pid(real_bridge, sid) == pid


async def test_follow_up_after_pi_was_killed_between_turns_resumes_the_file(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    os.kill(pid, signal.SIGKILL)
    await wait_gone(pid)
    after, messages = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["sessionId"] == sid
    assert messages[0]["type"] == "session.resumed"
    [seen] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(seen["body"]) == [f"before-{tag}", f"after-{tag}"]
    assert await live_pid(real_bridge, sid) != pid


async def test_pi_killed_mid_run_fails_retryable_then_the_next_turn_resumes(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    run_id = f"killed-{tag}"
    _, task = start_request(
        real_bridge,
        "pi/run",
        {
            "runId": run_id,
            "prompt": "go",
            "provider": "fake",
            "model": "toolslow",
            "cwd": str(tmp_path),
            "sessionId": sid,
        },
    )
    await messages_of(real_bridge).wait_type(run_id, "tool.update")
    os.kill(pid, signal.SIGKILL)
    result, _ = await answer_or_error(task)
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "process" and result["error"]["retryable"] is True
    messages = messages_of(real_bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert any(m["type"] == "tool.failed" for m in messages), "the open tool was closed"
    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["sessionId"] == sid
    [seen] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(seen["body"])[0] == f"before-{tag}"


async def test_retry_inside_a_conversation_shows_the_model_the_prompt_once(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    result = await request(
        real_bridge,
        "pi/run",
        {
            "prompt": f"flaky-{tag}",
            "provider": "fake",
            "model": "err500",
            "cwd": str(tmp_path),
            "sessionId": sid,
            "retry": {"maxAttempts": 2, "initialDelayMs": 0},
        },
    )
    assert result["status"] == "failed" and result["attempts"] == 2
    failed = requests_with(scripted_model, f"flaky-{tag}")
    assert len(failed) == 2, "one HTTP request per attempt: pi never retried on its own"
    for seen in failed:
        assert user_texts(seen["body"]) == [f"before-{tag}", f"flaky-{tag}"]
    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [seen] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(seen["body"]).count(f"flaky-{tag}") <= 1


async def test_a_steer_mid_run_is_taken_in_and_the_run_ends(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    run_id = f"steered-{tag}"
    _, task = start_request(
        real_bridge,
        "pi/run",
        {"runId": run_id, "prompt": f"go-{tag}", "provider": "fake", "model": "tool", "cwd": str(tmp_path)},
    )
    await messages_of(real_bridge).wait_type(run_id, "tool.call")
    answer = await request(real_bridge, "pi/steer", {"runId": run_id, "message": f"steer-{tag}"})
    assert answer == {"runId": run_id, "accepted": True}
    result, _ = await answer_or_error(task)
    assert result["status"] == "completed"
    messages = messages_of(real_bridge).by_run[run_id]
    assert_stream_invariants(messages)
    steered = [m for m in messages if m["type"] == "run.steered"]
    assert [m["content"]["text"] for m in steered] == [f"steer-{tag}"]
    assert any(f"steer-{tag}" in (user_texts(r["body"]) or [""])[-1] for r in scripted_model.requests)
    late = await request(real_bridge, "pi/steer", {"runId": run_id, "message": "too late"})
    assert late["accepted"] is False and late["reason"]


async def test_close_session_stops_the_live_pi_and_a_later_run_resumes(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    assert await request(real_bridge, "pi/closeSession", {"sessionId": sid}) == {
        "sessionId": sid,
        "closed": True,
    }
    await wait_gone(pid)
    assert await request(real_bridge, "pi/closeSession", {"sessionId": sid}) == {
        "sessionId": sid,
        "closed": False,
    }
    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [seen] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(seen["body"]) == [f"before-{tag}", f"after-{tag}"]


async def test_retry_of_a_new_conversation_s_first_prompt_keeps_its_id_and_shows_it_once(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    result = await request(
        real_bridge,
        "pi/run",
        {
            "prompt": f"first-{tag}",
            "provider": "fake",
            "model": "err500",
            "cwd": str(tmp_path),
            "retry": {"maxAttempts": 2, "initialDelayMs": 0},
        },
    )
    assert result["status"] == "failed" and result["attempts"] == 2
    for seen in requests_with(scripted_model, f"first-{tag}"):
        assert user_texts(seen["body"]) == [f"first-{tag}"]
    sid = result["sessionId"]
    after, _ = await turn(real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["sessionId"] == sid


async def test_an_image_goes_with_the_prompt_to_the_model_and_a_bad_one_is_named(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    image = {"mimeType": "image/png", "data": PIXEL_PNG}
    result, _ = await turn(real_bridge, f"see-{tag}", cwd=str(tmp_path), images=[image])
    assert result["status"] == "completed"
    [seen] = requests_with(scripted_model, f"see-{tag}")
    assert image_urls(seen["body"]) == [f"data:image/png;base64,{PIXEL_PNG}"], "the image, as sent"
    for bad, field in (
        ({"mimeType": "image/png", "data": "no base64!"}, "data"),
        ({**image, "mimeType": "text/plain"}, "mimeType"),
    ):
        with pytest.raises(JsonRpcException) as refused:
            await turn(real_bridge, "see", cwd=str(tmp_path), images=[bad])
        assert refused.value.code == -32602 and f"images.0.{field}" in str(refused.value), refused.value


@pytest_lsp.fixture(config=bridge_config())
async def json_engine_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """The real pi, one process per prompt (engine json)."""
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "engine": "json"})
    yield lsp_client
    await lsp_client.shutdown_session()


async def test_one_process_per_prompt_refuses_images_rather_than_drop_them(
    json_engine_bridge: LanguageClient, tmp_path: Path
) -> None:
    lsp_client = json_engine_bridge
    result = await request(
        lsp_client,
        "pi/run",
        {
            "prompt": "see",
            "provider": "fake",
            "model": "echo",
            "cwd": str(tmp_path),
            "images": [{"mimeType": "image/png", "data": PIXEL_PNG}],
        },
    )
    assert result["status"] == "failed" and result["error"]["kind"] == "usage", result
    assert "images" in result["error"]["message"]
    terminal = messages_of(lsp_client).by_run[result["runId"]][-1]
    assert terminal["type"] == "terminal.failed"


async def test_a_session_id_prefix_continues_the_same_conversation_on_the_same_pi(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"one-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    # (the leading characters of pi's ids are a timestamp: sessions made together share them)
    second, _ = await turn(real_bridge, f"two-{tag}", cwd=str(tmp_path), sessionId=sid[:-4])
    assert second["sessionId"] == sid, "a prefix names the whole session"
    assert await live_pid(real_bridge, sid) == pid, "the prefix run went to the conversation's live pi"
    live = (await request(real_bridge, "pi/runs", None))["live"]
    assert [entry["sessionId"] for entry in live].count(sid) == 1
    third, _ = await turn(real_bridge, f"three-{tag}", cwd=str(tmp_path), sessionId=sid)
    [seen] = requests_with(scripted_model, f"three-{tag}")
    assert user_texts(seen["body"]) == [f"one-{tag}", f"two-{tag}", f"three-{tag}"], "no turn was lost"


async def test_close_session_during_a_new_conversation_s_first_run_cancels_it(
    real_bridge: LanguageClient, tmp_path: Path
) -> None:
    run_id = f"first-{os.urandom(4).hex()}"
    _, task = start_request(
        real_bridge,
        "pi/run",
        {"runId": run_id, "prompt": "hi", "provider": "fake", "model": "slow", "cwd": str(tmp_path)},
    )
    started = await messages_of(real_bridge).wait_type(run_id, "session.started")
    sid = started["content"]["sessionId"]
    await messages_of(real_bridge).wait_type(run_id, "assistant")
    closed = await request(real_bridge, "pi/closeSession", {"sessionId": sid})
    assert closed == {"sessionId": sid, "closed": True}
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled", "the close cancelled the run"
    assert error.data["attempts"] == 1, "a cancelled run is not retried"
    messages = messages_of(real_bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    live = (await request(real_bridge, "pi/runs", None))["live"]
    assert sid not in [entry["sessionId"] for entry in live], "the closed conversation has no pi"


async def test_a_resumed_conversation_takes_the_spare(
    warm_real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await turn(warm_real_bridge, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    await request(warm_real_bridge, "pi/closeSession", {"sessionId": sid})
    deadline = time.monotonic() + 30
    spare = None
    while spare is None:  # the next spare, primed in the folder the conversations run in
        assert time.monotonic() < deadline, "no spare primed in the conversation's folder"
        warm = (await request(warm_real_bridge, "pi/runs", None))["warmPids"]
        spare = next((pid for pid in warm if psutil.Process(pid).cwd() == str(tmp_path)), None)
        await asyncio.sleep(0.05)
    await turn(warm_real_bridge, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert await live_pid(warm_real_bridge, sid) == spare, "the spare took the resumed conversation"
    [seen] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(seen["body"]) == [f"before-{tag}", f"after-{tag}"]


async def test_one_folder_spelled_three_ways_keeps_one_live_pi(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    link = tmp_path / "link"
    link.symlink_to(work)
    tag = os.urandom(4).hex()
    first, _ = await turn(real_bridge, f"a-{tag}", cwd=str(work))
    sid = first["sessionId"]
    pid = await live_pid(real_bridge, sid)
    for index, cwd in enumerate((f"{work}/", str(link))):
        result, _ = await turn(real_bridge, f"b{index}-{tag}", cwd=cwd, sessionId=sid)
        assert result["status"] == "completed"
        assert await live_pid(real_bridge, sid) == pid, f"{cwd!r} respawned the conversation's pi"
    [seen] = requests_with(scripted_model, f"b1-{tag}")
    assert user_texts(seen["body"]) == [f"a-{tag}", f"b0-{tag}", f"b1-{tag}"]


async def test_a_start_that_fails_never_turns_live_conversations_off(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """A provider typo makes pi exit before it answers: that run fails, and the next one still
    gets a live conversation (no spare here, so this start is the bridge's first)."""
    bridge = RawBridge()
    try:
        bridge.initialize({"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False})
        params = {"prompt": "hi", "provider": "nosuch", "model": "echo", "cwd": str(tmp_path)}
        typo = bridge.call("pi/run", params)["result"]
        assert typo["status"] == "failed" and typo["error"]["retryable"] is False, typo
        good = bridge.call("pi/run", {**params, "provider": "fake"})["result"]
        assert good["status"] == "completed", good
        live = bridge.call("pi/runs", {})["result"]["live"]
        assert good["sessionId"] in [entry["sessionId"] for entry in live], "the next run was live"
    finally:
        bridge.close()


RETRY_THREE = {"maxAttempts": 3, "initialDelayMs": 0}


@pytest.mark.parametrize("scenario", ["err500", "flaky"])
async def test_one_process_per_prompt_retry_shows_the_model_the_conversation_and_the_prompt_once(
    json_engine_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, scenario: str
) -> None:
    client, tag = json_engine_bridge, os.urandom(4).hex()
    first, _ = await turn(client, f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    scripted_model.reset()  # re-arms flaky: two failures, then an answer
    result, messages = await turn(
        client, f"retried-{tag}", model=scenario, cwd=str(tmp_path), sessionId=sid, retry=RETRY_THREE
    )
    assert (result["status"], result["attempts"]) == ("failed" if scenario == "err500" else "completed", 3)
    assert result["sessionId"] == sid
    assert {m["content"]["sessionId"] for m in messages if m["type"].startswith("session.")} == {sid}
    seen = requests_with(scripted_model, f"retried-{tag}")
    assert len(seen) == 3, "one model request per attempt"
    for body in (r["body"] for r in seen):
        assert user_texts(body) == [f"before-{tag}", f"retried-{tag}"], "the earlier turn, the prompt: once"
    await turn(client, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [after] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(after["body"]) == [f"before-{tag}", f"retried-{tag}", f"after-{tag}"]


@pytest.mark.parametrize("how", ["new", "continueSession"])
async def test_one_process_per_prompt_retry_of_a_first_prompt_stays_in_one_session_that_shows_it_once(
    json_engine_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, how: str
) -> None:
    client, tag = json_engine_bridge, os.urandom(4).hex()
    extra = {"continueSession": True} if how == "continueSession" else {}
    scripted_model.reset()
    result, messages = await turn(
        client, f"first-{tag}", model="flaky", cwd=str(tmp_path), retry=RETRY_THREE, **extra
    )
    assert (result["status"], result["attempts"]) == ("completed", 3)
    sid = result["sessionId"]
    announced = [m for m in messages if m["type"].startswith("session.")]
    assert [(m["type"], m["content"]["sessionId"]) for m in announced] == [("session.started", sid)] * 3
    seen = requests_with(scripted_model, f"first-{tag}")
    assert [user_texts(r["body"]) for r in seen] == [[f"first-{tag}"]] * 3
    listed = await request(client, "pi/sessions", {"cwd": str(tmp_path)})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid], "no session left of a failed attempt"
    await turn(client, f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [after] = requests_with(scripted_model, f"after-{tag}")
    assert user_texts(after["body"]) == [f"first-{tag}", f"after-{tag}"]
