"""Load on the rpc engine: 20 conversations x 3 turns at once with random cancels and steers, and
150 turns in one conversation with the bridge's RSS, fds and threads flat.

Each test prints one `LOAD ...` line with what it measured (pytest -s). Every wait has a timeout;
processes are ended by pid; each test ends with no process of any run left.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from tests.load.test_load import proc_stats
from tests.support.env import EXEC_BRIDGE, requires_pi
from tests.support.leaks import run_processes_alive
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants


def report(name: str, **figures: Any) -> None:
    print(f"\nLOAD {name}: {json.dumps(figures)}")


#: Turns of each of the 20 conversations: each conversation's pi is checked out again, and more
#: conversations than maxLiveSessions keep closing idle pis to make room.
TURNS = 3


class _Crowd:
    """20 conversations sharing one bridge: each turn's outcome, what broke, the most pis live."""

    def __init__(self, bridge: RawBridge, cwd: Path, log_file: Path) -> None:
        self.bridge = bridge
        self.cwd = cwd
        self.log_file = log_file
        self.failures: list[str] = []
        self.outcomes: dict[str, int] = {"completed": 0, "cancelled": 0, "failed": 0, "steered": 0}
        self.most_live = 0
        self.lock = threading.Lock()

    def conversation(self, index: int, seed: int) -> None:
        local = random.Random(seed)
        session_id: str | None = None
        for number in range(TURNS):
            session_id = self.turn(local, f"c{index}-t{number}", index, number, session_id)

    def stalled(self, run_id: str, exc: AssertionError) -> None:
        """Record a stalled turn with what the bridge had said of it and what it held live then."""
        kinds = [m["type"] for m in self.bridge.run_messages(run_id)]
        runs = self.bridge.call("pi/runs", {}, timeout=30).get("result")
        logged = [line for line in self.log_file.read_text().splitlines() if run_id in line][-20:]
        with self.lock:
            self.failures.append(f"{run_id}: {exc}; its messages {kinds}; pi/runs {runs}; its log {logged}")

    def turn(
        self, local: random.Random, run_id: str, index: int, number: int, session_id: str | None
    ) -> str | None:
        """One turn: a run, perhaps steered or cancelled once its first answer streams."""
        bridge = self.bridge
        model = local.choice(["echo", "echo", "slow-10", "tool"])
        params: dict[str, Any] = {
            "runId": run_id,
            "prompt": f"conversation {index} turn {number}",
            "provider": "fake",
            "model": model,
            "cwd": str(self.cwd),
        }
        if session_id:
            params["sessionId"] = session_id
        msg_id = bridge.request("pi/run", params)
        action = local.random()
        if model != "echo" and action < 0.7:
            try:
                bridge.wait_until(
                    lambda: (
                        bridge.has_response(msg_id)
                        or any(m["type"] == "assistant" for m in bridge.by_run.get(run_id, []))
                    ),
                    timeout=120,
                    what=f"an assistant message or the answer of run {run_id}",
                )
            except AssertionError as exc:
                self.stalled(run_id, exc)
                raise
            if action < 0.35:
                steer = bridge.call("pi/steer", {"runId": run_id, "message": f"steer {index}"})
                if steer["result"]["accepted"]:
                    with self.lock:
                        self.outcomes["steered"] += 1
            else:
                bridge.call("pi/cancel", {"runId": run_id}, timeout=60)
        try:
            answer = bridge.response(msg_id, timeout=180)
        except AssertionError as exc:
            self.stalled(run_id, exc)
            raise
        try:
            assert_stream_invariants(bridge.run_messages(run_id))
        except AssertionError as exc:
            self.failures.append(f"{run_id}: {exc}")
        data = answer["error"]["data"] if "error" in answer else answer["result"]
        if "error" in answer and (
            data["shutdown"]["survivors"]
            or run_processes_alive([p for p in data["shutdown"]["pids"] if not data["shutdown"]["agentKept"]])
        ):
            self.failures.append(f"{run_id}: processes survived the cancel")
        if data["status"] == "failed":  # every turn here can run: a failure is the bridge's
            self.failures.append(f"{run_id} failed: {data.get('error')}")
        live = len(bridge.call("pi/runs", {})["result"]["live"])
        with self.lock:
            self.outcomes[data["status"]] += 1
            self.most_live = max(self.most_live, live)
        return data.get("sessionId") or session_id


@requires_pi
@pytest.mark.realpi
@pytest.mark.slow
def test_20_conversations_of_3_turns_with_random_cancels_and_steers(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    rng = random.Random(20261201)
    log_file = tmp_path / "bridge.log"
    bridge = RawBridge(log_file=log_file, command=EXEC_BRIDGE)
    started = time.monotonic()
    try:
        bridge.initialize(
            {
                "env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)},
                "maxConcurrentRuns": 32,
                "maxLiveSessions": 8,
                "checkpoints": False,
            }
        )
        crowd = _Crowd(bridge, tmp_path, log_file)
        threads = [
            threading.Thread(target=crowd.conversation, args=(i, rng.randrange(1 << 30)), daemon=True)
            for i in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not any(thread.is_alive() for thread in threads), "a conversation did not finish"
        assert not crowd.failures, crowd.failures
        assert sum(crowd.outcomes[k] for k in ("completed", "cancelled", "failed")) == 20 * TURNS
        assert crowd.most_live <= 8, f"{crowd.most_live} live pis under maxLiveSessions 8"
        closed = re.findall(r"checked out (\d+) times\) closed to make room", log_file.read_text())
        assert "0" not in closed, "a pi was closed to make room before its prompt reached it"
        report(
            f"20 conversations x {TURNS} turns (real pi, rpc engine)",
            wall_s=round(time.monotonic() - started, 1),
            **crowd.outcomes,
            most_live=crowd.most_live,
            closed_to_make_room=len(closed),
            bridge=proc_stats(bridge.pid),
        )
    finally:
        bridge.close()


#: Turns before the first mark (the bridge's caches and allocator settle), then turns between the
#: marks. The leak bounds hold over the turns between the marks.
SETTLE_TURNS, MEASURED_TURNS = 50, 100
#: The most the bridge's RSS may grow per turn between the marks. A rate (8 MB over 400 turns, the
#: bound this test had when it measured 400 turns) so that measuring fewer turns does not loosen it.
RSS_GROWTH_PER_TURN_KB = 8 * 1024 / 400


@pytest.fixture(scope="module")
def undelayed_agent_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A pi agent dir on a scripted model of its own that streams without its per-piece pauses:
    the turns measure the bridge, not the model's pacing."""
    with ScriptedModelServer(delay_scale=0) as server:
        agent_dir = tmp_path_factory.mktemp("pi-agent-undelayed")
        write_pi_agent_dir(agent_dir, server.base_url)
        yield agent_dir


@requires_pi
@pytest.mark.realpi
@pytest.mark.slow
def test_150_turns_in_one_conversation_keep_memory_fds_and_threads_flat(
    undelayed_agent_dir: Path, tmp_path: Path
) -> None:
    bridge = RawBridge(command=EXEC_BRIDGE)
    last = SETTLE_TURNS + MEASURED_TURNS
    try:
        bridge.initialize({"env": {"PI_CODING_AGENT_DIR": str(undelayed_agent_dir)}, "checkpoints": False})
        marks: dict[int, dict[str, int]] = {}
        session_id: str | None = None
        live_pids: set[int] = set()
        started = time.monotonic()
        for index in range(1, last + 1):
            params: dict[str, Any] = {
                "prompt": f"turn {index}",
                "provider": "fake",
                "model": "text",
                "cwd": str(tmp_path),
            }
            if session_id:
                params["sessionId"] = session_id
            result = bridge.call("pi/run", params, timeout=60)["result"]
            assert result["status"] == "completed", result
            session_id = result["sessionId"]
            if index % SETTLE_TURNS == 0:
                assert_stream_invariants(bridge.run_messages(result["runId"]))
                live_pids |= {entry["pid"] for entry in bridge.call("pi/runs", {})["result"]["live"]}
            if index in (SETTLE_TURNS, last):
                marks[index] = proc_stats(bridge.pid)
        elapsed = time.monotonic() - started
        first, final = marks[SETTLE_TURNS], marks[last]
        report(
            f"{last} turns in one conversation (real pi, rpc engine)",
            wall_s=round(elapsed, 1),
            turns_per_s=round(last / elapsed, 1),
            live_pis=len(live_pids),
            **{f"after_{SETTLE_TURNS}": first, f"after_{last}": final},
        )
        assert len(live_pids) == 1, "one live pi served every turn"
        bound_kb = RSS_GROWTH_PER_TURN_KB * MEASURED_TURNS
        assert final["rss_kb"] - first["rss_kb"] < bound_kb, (
            f"RSS grew by more than {bound_kb:.0f} kB over {MEASURED_TURNS} turns"
        )
        assert final["fds"] <= first["fds"] + 2, "file descriptors leak"
        assert final["threads"] <= first["threads"] + 2, "threads leak"
    finally:
        bridge.close()
