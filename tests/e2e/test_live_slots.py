"""The conversation registry under pressure, against tests/fakes/fake_rpc_pi.py: at most
`maxLiveSessions` live pis, conversations waiting for one served first come first served, no pi
closed before its prompt reached it, every slot back after cancel, steer, death and error, and
the steps before a prompt (waiting for a slot, starting pi, configuring it) stopped by a cancel.

Every fake pi appends "<pid> <command>" to a file, so the tests see which pi got what."""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.env import FAKE_PI, ROOT
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

FAKE_RPC_PI = [sys.executable, str(ROOT / "tests" / "fakes" / "fake_rpc_pi.py")]
WAIT = 30.0


def commands_by_pi(path: Path) -> dict[int, list[str]]:
    """pid -> the commands that fake pi received, in order."""
    seen: dict[int, list[str]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            pid, _, kind = line.partition(" ")
            seen[int(pid)].append(kind)
    return seen


def start(bridge: RawBridge, run_id: str, model: str, **params: Any) -> Any:
    return bridge.request("pi/run", {"runId": run_id, "prompt": f"hi {run_id}", "model": model, **params})


def first_index(bridge: RawBridge, run_id: str, kind: str) -> int:
    """Where the run's first message of `kind` came among everything the bridge sent."""
    return next(
        index
        for index, message in enumerate(bridge.seen)
        if message.get("method") == "pi/message"
        and message["params"]["runId"] == run_id
        and message["params"]["type"] == kind
    )


def live_count(bridge: RawBridge) -> int:
    return len(bridge.call("pi/runs", {})["result"]["live"])


def test_no_more_live_pis_than_the_limit_and_none_is_closed_before_its_prompt(tmp_path: Path) -> None:
    commands = tmp_path / "commands"
    bridge = RawBridge()
    try:
        bridge.initialize(
            {
                "piCommand": FAKE_RPC_PI,
                "warmPool": False,
                "maxLiveSessions": 2,
                "env": {"FAKE_RPC_PI_COMMANDS": str(commands)},
            }
        )
        busy = [start(bridge, name, "slow") for name in ("a", "b")]
        for name in ("a", "b"):
            bridge.wait_message(name, "assistant")
        waiting = {name: start(bridge, name, "text") for name in ("c", "d", "e")}
        for name in waiting:
            queued = bridge.wait_message(name, "run.queued")
            assert queued["content"]["reason"] == "live" and queued["content"]["limit"] == 2
        assert live_count(bridge) == 2, "no third live pi while both are busy"
        for msg_id, name in zip(busy, ("a", "b"), strict=True):
            bridge.call("pi/cancel", {"runId": name})
            assert bridge.response(msg_id)["error"]["data"]["status"] == "cancelled"
        for name, msg_id in waiting.items():
            answer = bridge.response(msg_id, WAIT)
            assert answer["result"]["status"] == "completed", answer
            assert_stream_invariants(bridge.run_messages(name))
        assert live_count(bridge) <= 2
    finally:
        bridge.close()
    pis = commands_by_pi(commands)
    assert len(pis) == 5, f"one pi per conversation, none started twice: {dict(pis)}"
    for pid, got in pis.items():
        assert "prompt" in got, f"pi {pid} was closed before its prompt reached it: {got}"


def test_conversations_waiting_for_the_one_live_slot_get_it_in_the_order_they_came() -> None:
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "warmPool": False, "maxLiveSessions": 1})
        busy = start(bridge, "busy", "slow")
        bridge.wait_message("busy", "assistant")
        waiting = {}
        for name in ("c", "d", "e", "f"):
            waiting[name] = start(bridge, name, "text")
            bridge.wait_message(name, "run.queued")  # in line before the next one asks
        bridge.call("pi/cancel", {"runId": "busy"})
        bridge.response(busy)
        for msg_id in waiting.values():
            assert bridge.response(msg_id, WAIT)["result"]["status"] == "completed"
        starts = [first_index(bridge, name, "session.started") for name in waiting]
        ends = [first_index(bridge, name, "terminal.completed") for name in waiting]
        assert starts == sorted(starts), "first come, first served"
        assert all(end < after for end, after in zip(ends, starts[1:], strict=False)), "one at a time"
    finally:
        bridge.close()


def test_every_slot_comes_back_after_cancel_steer_death_and_error(tmp_path: Path) -> None:
    """One live slot: a leaked one would leave every later conversation waiting for ever."""
    bridge = RawBridge(env={"PI_BRIDGE_RPC_COMMAND_TIMEOUT": "1.5", "PI_BRIDGE_PI_START_TIMEOUT": "1.5"})
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "warmPool": False, "maxLiveSessions": 1})
        cancelled = start(bridge, "cancelled", "slow")
        bridge.wait_message("cancelled", "assistant")
        bridge.call("pi/cancel", {"runId": "cancelled"})
        assert bridge.response(cancelled)["error"]["data"]["status"] == "cancelled"

        steered = start(bridge, "steered", "slow")
        bridge.wait_message("steered", "assistant")
        assert bridge.call("pi/steer", {"runId": "steered", "message": "stop soon"})["result"]["accepted"]
        bridge.wait_message("steered", "run.steered")
        bridge.call("pi/cancel", {"runId": "steered"})
        bridge.response(steered)

        died = bridge.response(start(bridge, "died", "die"), WAIT)
        assert died["result"]["status"] == "failed" and died["result"]["error"]["kind"] == "process"

        failed = bridge.response(start(bridge, "failed", "exit_at_start"), WAIT)
        assert failed["result"]["status"] == "failed"

        mute = bridge.response(start(bridge, "mute", "mute"), WAIT)
        assert mute["result"]["status"] == "failed" and mute["result"]["error"]["kind"] == "stalled"

        # The one slot is free again: a conversation gets it at once, the next waits for it.
        first = start(bridge, "first", "slow")
        bridge.wait_message("first", "assistant")
        assert not any(m["type"] == "run.queued" for m in bridge.run_messages("first")), (
            "the slot was not free"
        )
        second = start(bridge, "second", "slow")
        assert bridge.wait_message("second", "run.queued")["content"]["reason"] == "live"
        bridge.call("pi/cancel", {"runId": "first"})
        bridge.response(first)
        bridge.wait_message("second", "assistant")
        bridge.call("pi/cancel", {"runId": "second"})
        bridge.response(second)
        answer = bridge.response(start(bridge, "after", "text"), WAIT)
        assert answer["result"]["status"] == "completed", answer
    finally:
        bridge.close()


def test_a_cancel_while_pi_starts_stops_it_before_the_prompt_is_sent(tmp_path: Path) -> None:
    commands = tmp_path / "commands"
    bridge = RawBridge()
    try:
        bridge.initialize(
            {
                "piCommand": FAKE_RPC_PI,
                "warmPool": False,
                "env": {"FAKE_RPC_PI_COMMANDS": str(commands), "FAKE_RPC_PI_START_DELAY": "5"},
            }
        )
        msg_id = start(bridge, "starting", "slow_start")
        deadline = time.monotonic() + WAIT
        while not list(bridge.seen) or not _pi_alive(bridge):
            assert time.monotonic() < deadline, "pi did not start"
            time.sleep(0.02)
        began = time.monotonic()
        bridge.call("pi/cancel", {"runId": "starting"})
        answer = bridge.response(msg_id)
        assert time.monotonic() - began < 3, "the cancel waited for pi's start-up"
        assert answer["error"]["data"]["status"] == "cancelled"
        assert_stream_invariants(bridge.run_messages("starting"))
    finally:
        bridge.close()
    assert not any("prompt" in got for got in commands_by_pi(commands).values()), "the prompt was sent"


def test_a_cancel_while_a_waiting_conversation_waits_for_a_slot_answers_at_once(tmp_path: Path) -> None:
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "warmPool": False, "maxLiveSessions": 1})
        busy = start(bridge, "busy", "slow")
        bridge.wait_message("busy", "assistant")
        waiting = start(bridge, "waiting", "text")
        bridge.wait_message("waiting", "run.queued")
        bridge.call("pi/cancel", {"runId": "waiting"})
        assert bridge.response(waiting)["error"]["data"]["status"] == "cancelled"
        assert_stream_invariants(bridge.run_messages("waiting"))
        bridge.call("pi/cancel", {"runId": "busy"})
        bridge.response(busy)
        after = bridge.response(start(bridge, "after", "text"), WAIT)
        assert after["result"]["status"] == "completed"
    finally:
        bridge.close()


def test_a_wedged_pi_and_a_big_prompt_never_hang_the_cancel_or_the_shutdown(tmp_path: Path) -> None:
    """pi stops reading its stdin: a prompt over the pipe's size cannot be written whole. The
    cancel still answers, the tree is killed, and shutdown answers too."""
    bridge = RawBridge(env={"PI_BRIDGE_RPC_COMMAND_TIMEOUT": "30"})
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "warmPool": False})
        msg_id = bridge.request(
            "pi/run", {"runId": "big", "prompt": "x" * (1 << 20), "model": "wedged", "cwd": str(tmp_path)}
        )
        bridge.wait_message("big", "session.started")
        began = time.monotonic()
        cancel = bridge.call("pi/cancel", {"runId": "big"}, timeout=15)
        assert time.monotonic() - began < 10, "the cancel waited for the prompt to be written"
        receipt = cancel["result"]["shutdown"]
        assert receipt["survivors"] == [] and receipt["agentKept"] is False
        assert bridge.response(msg_id)["error"]["data"]["status"] == "cancelled"
        assert_stream_invariants(bridge.run_messages("big"))
        second = bridge.request(
            "pi/run", {"runId": "big2", "prompt": "y" * (1 << 20), "model": "wedged", "cwd": str(tmp_path)}
        )
        bridge.wait_message("big2", "session.started")
        began = time.monotonic()
        assert bridge.shutdown(timeout=15) == 0
        assert time.monotonic() - began < 10, "shutdown waited for the prompt to be written"
        assert bridge.response(second)["error"]["data"]["status"] == "cancelled"
    finally:
        bridge.close()


def _pi_alive(bridge: RawBridge) -> bool:
    from tests.support.leaks import run_processes

    return any("fake_rpc_pi" in " ".join(proc.cmdline()) for proc in run_processes(marker=bridge.marker))


def test_an_agent_that_never_answers_its_rpc_mode_falls_back_to_one_process_per_prompt() -> None:
    from tests.support.env import fake_pi_command

    bridge = RawBridge(env={"PI_BRIDGE_RPC_COMMAND_TIMEOUT": "1.5", "PI_BRIDGE_PI_START_TIMEOUT": "1.5"})
    try:
        bridge.initialize({"piCommand": fake_pi_command(), "warmPool": False, "env": {"FAKE_PI_RPC": "hang"}})
        for run_id in ("first", "second"):
            answer = bridge.call("pi/run", {"runId": run_id, "prompt": "hi", "model": "text"}, timeout=WAIT)
            assert answer["result"]["status"] == "completed", answer
            assert answer["result"]["text"] == "Hello from the fake pi. It streams a few deltas."
    finally:
        bridge.close()


def test_a_cancel_is_never_lost_to_pi_settling_at_once(tmp_path: Path) -> None:
    """The fake settles the moment it reads the abort: the run still ends cancelled, with a
    receipt that was checked and keeps the live pi out of the run's processes. (The tree
    containment's scan of /proc is what the settle used to overtake.)"""
    bridge = RawBridge(env={"PI_BRIDGE_CONTAINMENT": "tree"})
    try:
        bridge.initialize({"piCommand": FAKE_RPC_PI, "warmPool": False})
        session = None
        for index in range(6):
            params: dict[str, Any] = {"runId": f"r{index}", "prompt": "hi", "model": "slow"}
            if session:
                params["sessionId"] = session
            msg_id = bridge.request("pi/run", params)
            bridge.wait_message(f"r{index}", "assistant")
            receipt = bridge.call("pi/cancel", {"runId": f"r{index}"})["result"]["shutdown"]
            answer = bridge.response(msg_id)
            assert answer["error"]["data"]["status"] == "cancelled", answer
            messages = bridge.run_messages(f"r{index}")
            assert_stream_invariants(messages)
            assert messages[-1]["type"] == "terminal.cancelled"
            assert receipt["agentKept"] is True and receipt["stage"] == "interrupted", receipt
            live = bridge.call("pi/runs", {})["result"]["live"]
            session = answer["error"]["data"]["sessionId"]
            pids = [entry["pid"] for entry in live if entry["sessionId"] == session]
            assert len(pids) == 1, f"session {session}: live {live}, receipt {receipt}"
            assert pids[0] not in receipt["pids"], "the kept pi is not a process of the run"
    finally:
        bridge.close()


def test_an_ambiguous_session_prefix_fails_clearly(tmp_path: Path) -> None:
    bridge = RawBridge()
    agent_dir = tmp_path / "agent"
    folder = agent_dir / "sessions" / "--somewhere--"
    folder.mkdir(parents=True)
    for sid in ("abc11111-0000", "abc22222-0000"):
        (folder / f"2026-01-01T00-00-00-000Z_{sid}.jsonl").write_text(
            json.dumps({"type": "session", "id": sid}) + "\n"
        )
    try:
        bridge.initialize(
            {"piCommand": FAKE_RPC_PI, "warmPool": False, "env": {"PI_CODING_AGENT_DIR": str(agent_dir)}}
        )
        answer = bridge.call("pi/run", {"prompt": "hi", "model": "text", "sessionId": "abc"})["result"]
        assert answer["status"] == "failed" and answer["error"]["kind"] == "session", answer
        assert "abc11111-0000" in answer["error"]["message"] and "abc22222-0000" in answer["error"]["message"]
    finally:
        bridge.close()


def test_a_run_asked_for_while_the_bridge_stops_is_refused_and_starts_nothing(tmp_path: Path) -> None:
    """SIGTERM while a run's pi ignores its stop (the stop takes the grace): a pi/run read
    meanwhile must not start a pi that nobody would stop."""
    import signal

    commands = tmp_path / "commands"
    log = tmp_path / "bridge.log"
    bridge = RawBridge(log_file=log)
    try:
        bridge.initialize(
            {"piCommand": FAKE_RPC_PI, "warmPool": False, "env": {"FAKE_RPC_PI_COMMANDS": str(commands)}}
        )
        stubborn = start(bridge, "stubborn", "ignore_abort")
        bridge.wait_message("stubborn", "assistant")
        bridge.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + WAIT
        while "stopping: signal SIGTERM" not in log.read_text():  # the bridge's own word that it stops
            assert time.monotonic() < deadline, "the bridge did not begin to stop"
            time.sleep(0.01)
        # The stubborn pi takes the whole grace to stop: this run is read while the bridge stops.
        late = start(bridge, "late", "text")
        answer = bridge.response(late)
        assert answer["error"]["code"] == -32600 and "shutting down" in answer["error"]["message"], answer
        assert bridge.response(stubborn)["error"]["data"]["status"] == "cancelled"
        assert bridge.wait_exit() == 0
    finally:
        bridge.close()
    prompts = [pid for pid, got in commands_by_pi(commands).items() if "prompt" in got]
    assert len(prompts) == 1, "only the stubborn run's pi got a prompt"


LOGGING_WRAPPER = """\
import os, sys
with open(sys.argv[1], "a") as log:
    log.write(" ".join(sys.argv[3:]) + "\\n")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def test_a_run_that_waited_for_the_spare_s_probe_does_not_probe_again(tmp_path: Path) -> None:
    """The spare, primed at `initialized`, finds out that the agent has no live mode; the first
    run, which waited for it, goes to one process per prompt at once, without a probe of its own
    (a second start of the agent, which on a loaded machine took a short deadline's time)."""
    launches = tmp_path / "launches"
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(LOGGING_WRAPPER)
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": [sys.executable, str(wrapper), str(launches), str(FAKE_PI)]})
        answer = bridge.call("pi/run", {"runId": "first", "prompt": "hi", "model": "text"}, timeout=WAIT)
        assert answer["result"]["status"] == "completed", answer
        probes = [line for line in launches.read_text().splitlines() if "rpc" in line.split()]
        assert len(probes) == 1, f"the agent was probed for its live mode {len(probes)} times: {probes}"
    finally:
        bridge.close()
