"""Lifecycle: shutdown, exit, end of stdin and signals stop every run first; nothing outlives the bridge."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.support.env import fake_pi_command
from tests.support.leaks import assert_no_run_processes, tagged_processes
from tests.support.raw import RawBridge


@pytest.fixture
def bridge() -> Iterator[RawBridge]:
    raw = RawBridge()
    raw.initialize({"piCommand": fake_pi_command()})
    yield raw
    raw.close()


def start_stubborn_run(bridge: RawBridge, run_id: str) -> int:
    msg_id = bridge.request("pi/run", {"runId": run_id, "prompt": "x", "model": "stubborn"})
    bridge.message(run_id, "tool.update")
    assert tagged_processes(), "the run's processes are up"
    return msg_id


async def test_shutdown_stops_runs_before_answering(bridge: RawBridge) -> None:
    run_msg = start_stubborn_run(bridge, "s1")
    shutdown = bridge.request("shutdown", None)
    answer = bridge.response(shutdown, timeout=15)
    assert "error" not in answer
    assert tagged_processes() == [], "every run is stopped before shutdown answers"
    run_answer = bridge.response(run_msg)
    assert run_answer["error"]["code"] == -32800
    assert run_answer["error"]["data"]["shutdown"]["survivors"] == []
    order = [m.get("id") for m in bridge.seen if "method" not in m]
    assert order.index(run_msg) < order.index(shutdown)
    bridge.notify("exit", None)
    assert bridge.wait_exit() == 0
    await assert_no_run_processes(timeout=1)


async def test_end_of_stdin_mid_run_leaves_nothing(bridge: RawBridge) -> None:
    start_stubborn_run(bridge, "e1")
    assert bridge.proc.stdin is not None
    bridge.proc.stdin.close()
    terminal = bridge.message("e1", "terminal.cancelled", timeout=15)
    assert terminal["content"]["shutdown"]["survivors"] == []
    bridge.wait_exit(timeout=15)
    await assert_no_run_processes(timeout=1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_signal_to_the_bridge_mid_run_leaves_nothing(bridge: RawBridge, signum: signal.Signals) -> None:
    start_stubborn_run(bridge, "g1")
    bridge.proc.send_signal(signum)
    terminal = bridge.message("g1", "terminal.cancelled", timeout=15)
    assert terminal["content"]["shutdown"]["survivors"] == []
    bridge.wait_exit(timeout=15)
    await assert_no_run_processes(timeout=1)


async def test_exit_without_shutdown_still_stops_runs(bridge: RawBridge) -> None:
    start_stubborn_run(bridge, "x1")
    bridge.notify("exit", None)
    assert bridge.wait_exit(timeout=15) == 1, "exit without shutdown is exit code 1 (LSP)"
    await assert_no_run_processes(timeout=1)


async def test_missing_pi_is_a_terminal_failed_message_not_an_exception() -> None:
    raw = RawBridge(["--pi-command", "/nonexistent/pi --flag"])
    try:
        raw.initialize()
        msg_id = raw.request("pi/run", {"runId": "m1", "prompt": "hi"})
        answer = raw.response(msg_id)
        result = answer["result"]
        assert result["status"] == "failed"
        assert result["error"]["kind"] == "spawn" and result["error"]["retryable"] is False
        assert "/nonexistent/pi" in result["error"]["message"]
        terminal = raw.message("m1", "terminal.failed")
        assert terminal["seq"] == 1
        runs = raw.request("pi/runs", None)
        assert raw.response(runs)["result"]["runs"] == []
    finally:
        raw.close()


async def test_initialize_advertises_the_contract(bridge: RawBridge) -> None:
    first = bridge.seen[0]["result"]
    assert first["serverInfo"]["name"] == "pi-bridge"
    assert first["capabilities"]["experimental"]["piBridge"]["protocolVersion"] == 1
