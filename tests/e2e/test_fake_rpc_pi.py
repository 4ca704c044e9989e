"""The rpc engine against tests/fakes/fake_rpc_pi.py: faults a live pi can have but real pi
cannot be made to produce on demand. Each test ends with nothing of any run left."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.conftest import BRIDGE
from tests.support.env import ROOT, bridge_env
from tests.support.leaks import (
    assert_no_run_processes,
    run_processes_alive,
    tagged_processes,
    wait_for_run_process,
)
from tests.support.lsp import answer_or_error, initialize, make_client, messages_of, request, start_request
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

FAKE_RPC_PI = [sys.executable, str(ROOT / "tests" / "fakes" / "fake_rpc_pi.py")]


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=BRIDGE,
        client_factory=make_client,
        server_env=bridge_env({"PI_BRIDGE_RPC_COMMAND_TIMEOUT": "1.5", "PI_BRIDGE_PI_START_TIMEOUT": "1.5"}),
    )
)
async def rpc_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """A bridge whose live pi is the fake rpc pi (no spare: each conversation spawns with its
    scenario as --model)."""
    await initialize(lsp_client, {"piCommand": FAKE_RPC_PI, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def run(
    client: LanguageClient, model: str, **params: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = await request(client, "pi/run", {"prompt": "hi", "model": model, **params})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def cancel_mid_run(client: LanguageClient, run_id: str, model: str, kind: str) -> dict[str, Any]:
    _, task = start_request(client, "pi/run", {"runId": run_id, "prompt": "hi", "model": model})
    await messages_of(client).wait_type(run_id, kind)
    answer = await request(client, "pi/cancel", {"runId": run_id})
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled"
    assert_stream_invariants(messages_of(client).by_run[run_id])
    receipt: dict[str, Any] = answer["shutdown"]
    assert receipt["survivors"] == []
    return receipt


async def test_a_text_turn_completes_with_context_usage_and_session_cost(rpc_bridge: LanguageClient) -> None:
    result, messages = await run(rpc_bridge, "text")
    assert result["status"] == "completed" and result["text"] == "Hello from the fake rpc pi."
    terminal = messages[-1]["content"]
    assert terminal["contextUsage"] == {"tokens": 8, "contextWindow": 1000, "percent": 0.8}
    assert terminal["sessionCost"] == 0.25
    await assert_no_run_processes(client=rpc_bridge)


async def test_pi_ignoring_abort_is_killed_at_stage_three(rpc_bridge: LanguageClient) -> None:
    receipt = await cancel_mid_run(rpc_bridge, "deaf", "ignore_abort", "assistant")
    assert receipt["stage"] == "killed" and receipt["agentKept"] is False
    assert 2000 <= receipt["elapsedMs"] < 7500, "2 s for pi to settle after abort, then the kill"
    assert run_processes_alive(receipt["pids"]) == []
    assert (await request(rpc_bridge, "pi/runs", None))["live"] == []
    await assert_no_run_processes(client=rpc_bridge)


async def test_daemons_left_by_a_tool_after_abort_are_killed_and_pi_is_kept(
    rpc_bridge: LanguageClient,
) -> None:
    receipt = await cancel_mid_run(rpc_bridge, "daemons", "daemons", "tool.update")
    assert receipt["agentKept"] is True
    assert len(receipt["pids"]) >= 2, f"the setsid child and the double-forked daemon: {receipt['pids']}"
    assert run_processes_alive(receipt["pids"]) == []
    live = (await request(rpc_bridge, "pi/runs", None))["live"]
    assert len(live) == 1, "the conversation's pi serves the next prompt"
    await assert_no_run_processes(client=rpc_bridge)


async def test_a_cancel_ends_what_the_run_left_once_its_tool_ended_not_when_the_agent_settles(
    rpc_bridge: LanguageClient,
) -> None:
    """pi reports its tool ended 1.5 s before it settles: the daemons the tool left go then, while
    the cancel is still waiting for pi, and its receipt lists them."""
    run_id = "slow-settle"
    _, task = start_request(
        rpc_bridge, "pi/run", {"runId": run_id, "prompt": "hi", "model": "daemons_slow_settle"}
    )
    await messages_of(rpc_bridge).wait_type(run_id, "tool.update")
    daemons = await _sleepers(2, within=5.0)
    assert len(daemons) == 2, "the setsid child and the double-forked daemon"
    cancel = asyncio.ensure_future(request(rpc_bridge, "pi/cancel", {"runId": run_id}))
    await messages_of(rpc_bridge).wait_type(run_id, "tool.failed")
    assert await _ended(daemons, within=1.0), "the daemons went as the tool ended, before pi settled"
    assert not cancel.done(), "pi has not settled yet: the cancel is still waiting for it"
    answer = await cancel
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled"
    receipt = answer["shutdown"]
    assert receipt["agentKept"] is True and receipt["survivors"] == []
    assert {p.pid for p in daemons} <= set(receipt["pids"]), "the receipt lists what the early sweep ended"
    await assert_no_run_processes(client=rpc_bridge)


def _command_line(proc: psutil.Process) -> str:
    """`proc`'s command line ("" once it has ended: a zombie has none)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


async def _sleepers(count: int, within: float) -> list[psutil.Process]:
    """The daemons of the `daemons` scenarios once `count` of them run (what ran by then after
    `within` s: the double-forked one execs a moment after the tool's update)."""
    deadline = time.monotonic() + within
    while True:
        found = [p for p in tagged_processes() if "time.sleep(300)" in _command_line(p)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


async def _ended(procs: list[psutil.Process], within: float) -> bool:
    """Whether every process of `procs` has ended (a zombie has) within `within` s."""
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in procs if _command_line(p)]
        if not alive or time.monotonic() > deadline:
            return not alive
        await asyncio.sleep(0.02)


async def test_garbage_between_events_never_breaks_the_run(rpc_bridge: LanguageClient) -> None:
    result, _ = await run(rpc_bridge, "garbage")
    assert result["status"] == "completed" and result["text"] == "Hello from the fake rpc pi."


async def test_a_pi_that_never_answers_fails_clearly_after_a_bounded_wait(rpc_bridge: LanguageClient) -> None:
    await run(rpc_bridge, "text")  # rpc support is known from here on
    result, _ = await run(rpc_bridge, "mute")
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "stalled" and result["error"]["retryable"] is True
    assert "did not answer" in result["error"]["message"] or "no answer" in result["error"]["message"]
    await assert_no_run_processes(client=rpc_bridge)


async def test_a_pi_that_exits_at_start_fails_with_its_stderr(rpc_bridge: LanguageClient) -> None:
    await run(rpc_bridge, "text")
    result, _ = await run(rpc_bridge, "exit_at_start")
    assert result["status"] == "failed"
    assert "exiting at start on purpose" in result["error"]["message"]
    await assert_no_run_processes(client=rpc_bridge)


async def test_a_steer_is_taken_in_as_run_steered(rpc_bridge: LanguageClient) -> None:
    run_id = "steer-me"
    _, task = start_request(rpc_bridge, "pi/run", {"runId": run_id, "prompt": "hi", "model": "slow"})
    await messages_of(rpc_bridge).wait_type(run_id, "assistant")
    answer = await request(rpc_bridge, "pi/steer", {"runId": run_id, "message": "turn left"})
    assert answer == {"runId": run_id, "accepted": True}
    steered = await messages_of(rpc_bridge).wait_type(run_id, "run.steered")
    assert steered["content"] == {"text": "turn left"}
    await request(rpc_bridge, "pi/cancel", {"runId": run_id})
    await answer_or_error(task)
    assert_stream_invariants(messages_of(rpc_bridge).by_run[run_id])
    unknown = await request(rpc_bridge, "pi/steer", {"runId": "nope", "message": "x"})
    assert unknown["accepted"] is False and unknown["reason"]


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def logged_rpc_bridge(lsp_client: LanguageClient, tmp_path: Path) -> AsyncIterator[LanguageClient]:
    """The fake rpc pi, logging every command it reads to tmp_path/commands."""
    commands = tmp_path / "commands"
    await initialize(
        lsp_client,
        {"piCommand": FAKE_RPC_PI, "warmPool": False, "env": {"FAKE_RPC_PI_COMMANDS": str(commands)}},
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_steer_the_cancel_overtakes_is_cleared_once_pi_queued_it(
    logged_rpc_bridge: LanguageClient, tmp_path: Path
) -> None:
    client = logged_rpc_bridge
    first, _ = await run(client, "text")
    sid = first["sessionId"]
    _, slow = start_request(
        client, "pi/run", {"runId": "late", "prompt": "a", "model": "latesteer", "sessionId": sid}
    )
    await messages_of(client).wait_type("late", "assistant")
    steer = asyncio.ensure_future(request(client, "pi/steer", {"runId": "late", "message": "overtaken"}))
    log = tmp_path / "commands"
    deadline = time.monotonic() + 10
    while "steer" not in (log.read_text().split() if log.exists() else []):
        assert time.monotonic() < deadline, "the fake never read the steer"
        await asyncio.sleep(0.02)
    cancel = await request(client, "pi/cancel", {"runId": "late"})
    assert (await asyncio.wait_for(steer, 10))["accepted"] is True
    assert cancel["unsent"] == ["overtaken"], "queued after the first clear, taken by the second"
    _, error = await answer_or_error(slow)
    assert error is not None and error.data["unsent"] == ["overtaken"]
    commands = [line.split()[1] for line in log.read_text().splitlines()]
    assert commands.count("clear_queue") == 2 and commands.index("clear_queue") < commands.index("abort")
    after, messages = await run(client, "text", sessionId=sid)
    assert after["status"] == "completed"
    assert not [m for m in messages if m["type"] == "run.steered"], "the overtaken steer acted later"


async def test_a_stop_takes_the_runs_queued_behind_it_along(rpc_bridge: LanguageClient) -> None:
    first, _ = await run(rpc_bridge, "text")
    sid = first["sessionId"]
    _, slow = start_request(
        rpc_bridge, "pi/run", {"runId": "busy", "prompt": "a", "model": "slow", "sessionId": sid}
    )
    await messages_of(rpc_bridge).wait_type("busy", "assistant")
    _, queued = start_request(
        rpc_bridge, "pi/run", {"runId": "next", "prompt": "b", "model": "text", "sessionId": sid}
    )
    await messages_of(rpc_bridge).wait_type("next", "run.queued")
    cancel = await request(rpc_bridge, "pi/cancel", {"runId": "busy"})
    assert cancel["unsent"] == ["b"]
    _, error = await answer_or_error(slow)
    assert error is not None and error.data["unsent"] == ["b"]
    _, error = await answer_or_error(queued)
    assert error is not None and error.data["status"] == "cancelled" and error.data["shutdown"]["pids"] == []
    messages = messages_of(rpc_bridge).by_run["next"]
    assert_stream_invariants(messages)
    assert not [m for m in messages if m["type"] in ("assistant", "session.resumed")], "it never started"
    after, _ = await run(rpc_bridge, "text", sessionId=sid)
    assert after["status"] == "completed" and after["sessionId"] == sid


async def test_an_agent_without_rpc_falls_back_to_json(fake_bridge: LanguageClient) -> None:
    result = await request(fake_bridge, "pi/run", {"prompt": "hi", "model": "text"})
    assert result["status"] == "completed"
    assert result["text"] == "Hello from the fake pi. It streams a few deltas."


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def small_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """One live conversation at most, closed after 1 s idle."""
    await initialize(
        lsp_client, {"piCommand": FAKE_RPC_PI, "warmPool": False, "maxLiveSessions": 1, "sessionIdleMs": 1000}
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def live_sessions(client: LanguageClient) -> list[str]:
    return [entry["sessionId"] for entry in (await request(client, "pi/runs", None))["live"]]


async def test_beyond_max_live_sessions_the_idle_one_closes_then_idle_ones_close_on_time(
    small_bridge: LanguageClient,
) -> None:
    first, _ = await run(small_bridge, "text")
    second, _ = await run(small_bridge, "text")
    assert first["sessionId"] != second["sessionId"]
    deadline = time.monotonic() + 10
    while await live_sessions(small_bridge) != [second["sessionId"]]:
        assert time.monotonic() < deadline, "the least recently used idle conversation was not closed"
        await asyncio.sleep(0.05)
    while await live_sessions(small_bridge):
        assert time.monotonic() < deadline, "an idle conversation was not closed after sessionIdleMs"
        await asyncio.sleep(0.1)
    await assert_no_run_processes(client=small_bridge)
    again, _ = await run(small_bridge, "text", sessionId=first["sessionId"])
    assert again["status"] == "completed" and again["sessionId"] == first["sessionId"]


async def test_a_shutdown_while_the_spare_is_still_starting_leaves_no_process() -> None:
    """The spare (pre-spawned at `initialized`) has not answered its first command when the
    client shuts the bridge down: the agent being started is stopped too, before the answer."""
    bridge = RawBridge(env={"PI_BRIDGE_RPC_COMMAND_TIMEOUT": "30"})
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "env": {"FAKE_RPC_PI_SCENARIO": "mute"}})
        await wait_for_run_process("fake_rpc_pi.py")
        answer = bridge.response(bridge.request("shutdown", None), timeout=15)
        assert "error" not in answer
        assert tagged_processes() == [], "the starting spare is stopped before shutdown answers"
        bridge.notify("exit", None)
        assert bridge.wait_exit() == 0
    finally:
        bridge.close()


async def test_thinking_is_set_by_command_only_when_it_changes(tmp_path) -> None:
    """pi reports its thinking level at start: a first prompt (on the spare, started with no
    level) asking for that level sends nothing, a different one is one set_thinking_level, and
    the next prompt at it sends nothing again."""
    commands = tmp_path / "commands"
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "env": {"FAKE_RPC_PI_COMMANDS": str(commands)}})
        await wait_for_run_process("fake_rpc_pi.py")  # the spare
        sent = []
        session = None
        for thinking in ("off", "high", "high"):
            params = {"prompt": "hi", "model": "text", "thinking": thinking}
            if session:
                params["sessionId"] = session
            answer = bridge.response(bridge.request("pi/run", params))
            assert answer["result"]["status"] == "completed", answer
            session = answer["result"]["sessionId"]
            sent.append(commands.read_text().split().count("set_thinking_level"))
        assert sent == [0, 1, 1], "set_thinking_level only for the change to high"
    finally:
        bridge.close()


async def test_new_conversations_in_another_folder_get_the_next_spare_there(tmp_path) -> None:
    """The first spare is primed for the editor's folder (rootUri). New conversations that run in
    another folder must not cost a pi spawned for the old folder and stopped unused each time:
    the next spare is primed where they run, and the next new conversation there takes it."""
    work = tmp_path / "work"
    work.mkdir()
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI})
        params = {"prompt": "hi", "model": "text", "cwd": str(work)}
        first = bridge.response(bridge.request("pi/run", params))
        assert first["result"]["status"] == "completed", first
        deadline = time.monotonic() + 20
        spare = None
        while spare is None:
            assert time.monotonic() < deadline, "no spare primed in the folder the conversations run in"
            warm = bridge.response(bridge.request("pi/runs", None))["result"]["warmPids"]
            spare = next((pid for pid in warm if psutil.Process(pid).cwd() == str(work)), None)
            await asyncio.sleep(0.05)
        second = bridge.response(bridge.request("pi/run", params))
        assert second["result"]["status"] == "completed", second
        live = bridge.response(bridge.request("pi/runs", None))["result"]["live"]
        pids = {entry["sessionId"]: entry["pid"] for entry in live}
        assert pids[second["result"]["sessionId"]] == spare, "the second conversation took the spare"
    finally:
        bridge.close()


def test_a_session_file_that_is_a_fifo_never_freezes_the_bridge(tmp_path: Path) -> None:
    """A retry cuts the session file back before its prompt. A session file that is a FIFO
    (whatever made it one) is left alone (was: its open waited for a writer on the event loop,
    and the bridge answered nothing more, ever)."""
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    bridge = RawBridge()
    try:
        bridge.initialize(
            {
                "piCommand": FAKE_RPC_PI,
                "warmPool": False,
                "env": {"FAKE_RPC_PI_SESSION_FILE": str(fifo)},
                "retry": {"maxAttempts": 2, "initialDelayMs": 0, "maxDelayMs": 0},
            }
        )
        result = bridge.call("pi/run", {"prompt": "hi", "model": "err500", "runId": "fifo"}, timeout=10)[
            "result"
        ]
        assert result["status"] == "failed" and result["attempts"] == 2, result
        assert [m["type"] for m in bridge.run_messages("fifo")].count("run.retrying") == 1
        assert "result" in bridge.call("pi/runs", {}, timeout=10)
    finally:
        try:  # a bridge stuck opening the FIFO is let go, so that it can stop
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        bridge.close()


async def test_stopping_a_run_that_waits_in_line_takes_nothing_else_along(rpc_bridge: LanguageClient) -> None:
    first, _ = await run(rpc_bridge, "text")
    sid = first["sessionId"]
    _, slow = start_request(
        rpc_bridge, "pi/run", {"runId": "head", "prompt": "a", "model": "slow", "sessionId": sid}
    )
    await messages_of(rpc_bridge).wait_type("head", "assistant")
    waiting = {}
    for run_id, prompt in (("second", "b"), ("third", "c")):
        _, waiting[run_id] = start_request(
            rpc_bridge, "pi/run", {"runId": run_id, "prompt": prompt, "model": "text", "sessionId": sid}
        )
        await messages_of(rpc_bridge).wait_type(run_id, "run.queued")
    cancel = await request(rpc_bridge, "pi/cancel", {"runId": "second"})
    assert cancel["found"] is True and "unsent" not in cancel
    _, error = await answer_or_error(waiting["second"])
    assert error is not None and error.data["status"] == "cancelled" and "unsent" not in error.data
    assert not waiting["third"].done(), "the third still waits for the head of the line"
    cancel = await request(rpc_bridge, "pi/cancel", {"runId": "head"})
    assert cancel["unsent"] == ["c"]
    await answer_or_error(slow)
    _, error = await answer_or_error(waiting["third"])
    assert error is not None and error.data["status"] == "cancelled"
