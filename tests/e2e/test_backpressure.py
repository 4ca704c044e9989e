"""A client that stops reading: cancels still act at once, and nothing is lost or reordered."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bridge.stdio_client import encode as frame
from bridge.stdio_client import read_frame
from tests.harness import assert_no_run_processes, bridge_env, fake_pi_command, tagged_processes


def wait_until_stalled(progress: Path, timeout: float = 30.0) -> int:
    """Wait until the flooding agent stops making progress: its pipe is full because we do not read."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = int(progress.read_text() or 0) if progress.exists() else 0
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and time.monotonic() - since > 0.5:
            return now
        time.sleep(0.05)
    raise AssertionError("the agent never stalled: the bridge is buffering without bound")


async def test_cancel_acts_while_the_client_is_not_reading(tmp_path: Path) -> None:
    bridge = subprocess.Popen(
        [sys.executable, "-m", "bridge"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=bridge_env()
    )
    assert bridge.stdin is not None and bridge.stdout is not None
    try:
        options = {"piCommand": fake_pi_command(), "warmPool": False}
        bridge.stdin.write(
            frame(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"processId": None, "capabilities": {}, "initializationOptions": options},
                }
            )
        )
        bridge.stdin.flush()
        assert read_frame(bridge.stdout)["id"] == 1
        progress = tmp_path / "progress"
        run = {"runId": "flood", "prompt": str(progress), "model": "flood"}
        bridge.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "pi/run", "params": run}))
        bridge.stdin.flush()
        written = wait_until_stalled(progress)
        assert written < 64 * 1024 * 1024, "backpressure must bound what the bridge buffers"
        assert tagged_processes(), "the agent is alive, blocked on its pipe"
        bridge.stdin.write(
            frame({"jsonrpc": "2.0", "id": 3, "method": "pi/cancel", "params": {"runId": "flood"}})
        )
        bridge.stdin.flush()
        # Still not reading a single byte: the cancel must act anyway.
        await assert_no_run_processes(timeout=10)
        seqs: list[int] = []
        deltas: list[str] = []
        answers: dict[object, dict[str, object]] = {}
        while len(answers) < 2:
            message = read_frame(bridge.stdout)
            if message.get("method") == "pi/message":
                last = message["params"]
                seqs.append(last["seq"])  # type: ignore[index]
                if last["type"] == "assistant":  # type: ignore[index]
                    deltas.append(last["content"]["text"])  # type: ignore[index]
            else:
                answers[message["id"]] = message
        assert seqs == list(range(1, len(seqs) + 1)), "every message, in order"
        assert last["type"] == "terminal.cancelled"  # type: ignore[index]
        assert answers[2]["error"]["code"] == -32800  # type: ignore[index]
        assert answers[3]["result"]["found"] is True  # type: ignore[index]
        assert last["content"]["text"] == "".join(deltas) != ""  # type: ignore[index]
    finally:
        bridge.stdin.close()
        bridge.wait(timeout=30)


def wait_until_blocked_for(progress: Path, seconds: float, timeout: float = 60.0) -> int:
    """Wait until the agent made no progress for `seconds` (blocked on its pipe, or stopped)."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = int(progress.read_text() or 0) if progress.exists() else 0
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and time.monotonic() - since > seconds:
            return now
        time.sleep(0.05)
    raise AssertionError(f"the agent never stayed blocked for {seconds} s")


async def test_time_blocked_on_a_slow_client_is_not_agent_silence(tmp_path: Path) -> None:
    """A client slower than the agent must not get the run killed as `stalled` by silenceTimeoutMs:
    the agent is silent only because the bridge stopped reading it."""
    silence_ms = 500
    bridge = subprocess.Popen(
        [sys.executable, "-m", "bridge"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=bridge_env()
    )
    assert bridge.stdin is not None and bridge.stdout is not None
    try:
        options = {
            "piCommand": fake_pi_command(),
            "warmPool": False,
            "silenceTimeoutMs": silence_ms,
            "env": {"FAKE_PI_FLOOD_BYTES": str(24 * 1024 * 1024)},
        }
        init = {"processId": None, "capabilities": {}, "initializationOptions": options}
        bridge.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        bridge.stdin.flush()
        assert read_frame(bridge.stdout)["id"] == 1
        progress = tmp_path / "progress"
        run = {"runId": "slow-reader", "prompt": str(progress), "model": "flood"}
        bridge.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "pi/run", "params": run}))
        bridge.stdin.flush()
        # Not reading for three silence limits: the agent is blocked on its pipe all that time.
        wait_until_blocked_for(progress, 3 * silence_ms / 1000)
        answer: dict[str, object] | None = None
        while answer is None:
            message = read_frame(bridge.stdout)
            if message.get("id") == 2:
                answer = message
        result = answer["result"]
        assert isinstance(result, dict)
        assert result["status"] == "completed", result.get("error")
        assert result["attempts"] == 1
    finally:
        bridge.stdin.close()
        bridge.wait(timeout=30)
        await assert_no_run_processes(timeout=10)
