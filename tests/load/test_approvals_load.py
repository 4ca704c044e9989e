"""200 approvals pending at once across 20 conversations, over stdio: random answers, cancels, and
a client that disconnects. Every question is answered exactly once, and nothing leaks.

pi asks its gate about one tool call at a time; the fake rpc pi's `ask10` asks about ten at once,
so 20 conversations (5 on each of 4 bridges) hold 200 `pi/requestPermission` open together. Each
client answers each request after a short random wait: allow, reject with a reason, an option it
was never offered, or an error. One conversation per bridge is never answered and is cancelled;
the fourth bridge's client goes away while its 50 requests wait. The fake pi logs every answer
its gate got, so "exactly once" is read on the agent's side, not assumed from the bridge's.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bridge.policy.approvals import ALLOW_ONCE, REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from tests.support.env import ROOT, WAIT
from tests.support.raw import Message, RawBridge
from tests.support.streams import assert_stream_invariants

FAKE_RPC_PI = [sys.executable, str(ROOT / "tests" / "fakes" / "fake_rpc_pi.py")]
BRIDGES = 4
CONVERSATIONS = 5  # per bridge
QUESTIONS = 10  # per conversation (the fake's ask10)
PERMISSIONS = {"experimental": {"piBridge": {"permissions": True}}}
#: How each answer must be resolved: an option never offered, or an error, is no answer.
DECISION = {"allow": "allow", "reject": "reject", "made-up": "cancelled", "error": "cancelled"}


class Client:
    """One bridge's client: answers each pi/requestPermission as its run's plan says."""

    def __init__(self, bridge: RawBridge, seed: int) -> None:
        self.bridge = bridge
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.held: set[str] = set()  # runs whose requests are never answered
        self.asked: dict[str, list[Message]] = {}  # runId -> the requests it got
        self.answers: dict[str, str] = {}  # toolCallId -> what the client answered
        self.arrived = threading.Condition(self.lock)
        bridge.on_request = self.on_request

    def on_request(self, message: Message) -> None:
        params = message["params"]
        with self.lock:
            self.asked.setdefault(params["runId"], []).append(message)
            self.arrived.notify_all()
            if params["runId"] in self.held:
                return
            how = self.random.choice(["allow", "allow", "reject", "made-up", "error"])
            delay = self.random.uniform(0, 0.1)
            self.answers[params["toolCallId"]] = how
        threading.Timer(delay, self.answer, (message["id"], how)).start()

    def answer(self, msg_id: Any, how: str) -> None:
        option = {"allow": ALLOW_ONCE, "reject": REJECT_ONCE, "made-up": "allow-everything"}.get(how)
        try:
            if option is None:
                self.bridge.send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32603, "message": "no"}})
            else:
                self.bridge.answer(msg_id, {"optionId": option, "message": "not now"})
        except (ValueError, OSError):  # this client has gone away (the disconnect)
            pass

    def wait_asked(self, run_id: str, count: int) -> list[Message]:
        deadline = time.monotonic() + WAIT
        with self.lock:
            while len(self.asked.get(run_id, [])) < count:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"{run_id}: {len(self.asked.get(run_id, []))} of {count} requests"
                self.arrived.wait(remaining)
            return list(self.asked[run_id])


def _start(tmp_path: Path, index: int) -> tuple[RawBridge, Client, Path]:
    answers = tmp_path / f"answers-{index}.log"
    bridge = RawBridge(env={STATE_DIR_ENV: str(tmp_path / "state")})
    client = Client(bridge, seed=20261202 + index)
    bridge.initialize(
        {
            "piCommand": FAKE_RPC_PI,
            "warmPool": False,
            "maxLiveSessions": CONVERSATIONS + 1,
            "maxConcurrentRuns": CONVERSATIONS + 1,
            "env": {"FAKE_RPC_PI_ANSWERS": str(answers)},
        },
        capabilities=PERMISSIONS,
    )
    return bridge, client, answers


def _agent_answers(path: Path, expected: int) -> Counter[str]:
    """The gate answers the fake pis logged (request id -> how many), once `expected` are in."""
    deadline = time.monotonic() + WAIT
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= expected or time.monotonic() > deadline:
            return Counter(line.split()[0] for line in lines)
        time.sleep(0.05)  # a file another process appends to: polled, bounded by WAIT


def _check_run(bridge: RawBridge, client: Client, run_id: str, answer: Message) -> None:
    """One answered conversation: ten requests, ten resolutions, and what ran is what was allowed."""
    assert "result" in answer, answer
    messages = bridge.run_messages(run_id)
    assert_stream_invariants(messages)
    requested = [m["content"]["toolCallId"] for m in messages if m["type"] == "permission.requested"]
    resolved = {
        m["content"]["toolCallId"]: m["content"] for m in messages if m["type"] == "permission.resolved"
    }
    assert len(requested) == QUESTIONS and sorted(resolved) == sorted(requested), (requested, resolved)
    decisions = {call: DECISION[client.answers[call]] for call in requested}
    assert {call: content["decision"] for call, content in resolved.items()} == decisions
    ran = {m["content"]["toolCallId"] for m in messages if m["type"] == "tool.completed"}
    assert ran == {call for call, decision in decisions.items() if decision == "allow"}, ran


def _open_conversations(
    started: list[tuple[RawBridge, Client, Path]], cwd: Path
) -> list[tuple[int, str, Any]]:
    """Start every conversation's run: (bridge index, runId, request id); the first of each
    bridge is the one its client never answers."""
    runs: list[tuple[int, str, Any]] = []
    for index, (bridge, client, _) in enumerate(started):
        client.held.add(f"held-{index}")
        for number in range(CONVERSATIONS):
            run_id = f"held-{index}" if number == 0 else f"run-{index}-{number}"
            params = {"runId": run_id, "prompt": "go", "model": "ask10", "cwd": str(cwd)}
            runs.append((index, run_id, bridge.request("pi/run", params)))
    return runs


def _check_held(bridge: RawBridge, client: Client, run_id: str, answer: Message) -> None:
    """The cancelled conversation: each of its requests withdrawn and resolved cancelled, none ran."""
    assert answer["error"]["data"]["status"] == "cancelled", answer
    withdrawn = {m["params"]["id"] for m in bridge.seen if m.get("method") == "$/cancelRequest"}
    assert {r["id"] for r in client.asked[run_id]} <= withdrawn, "each held request was withdrawn"
    messages = bridge.run_messages(run_id)
    assert_stream_invariants(messages)
    resolved = [m["content"]["decision"] for m in messages if m["type"] == "permission.resolved"]
    assert resolved == ["cancelled"] * QUESTIONS, resolved
    assert not [m for m in messages if m["type"] == "tool.completed"], "nothing ran"


@pytest.mark.slow
def test_200_pending_approvals_are_each_answered_once_through_cancels_and_a_disconnect(
    tmp_path: Path,
) -> None:
    started = [_start(tmp_path, index) for index in range(BRIDGES)]
    try:
        runs = _open_conversations(started, tmp_path)
        for index, run_id, _ in runs:
            client = started[index][1]
            if index == BRIDGES - 1 or run_id.startswith("held"):
                client.wait_asked(run_id, QUESTIONS)
        gone, _, gone_answers = started[-1]
        gone.close_stdin()  # the last client goes away with its requests open
        assert gone.wait_exit(WAIT) is not None, "the bridge ends when its client is gone"
        for index, (bridge, _, _) in enumerate(started[:-1]):
            bridge.call("pi/cancel", {"runId": f"held-{index}"})

        asked = 0
        for index, run_id, msg_id in runs:
            bridge, client, _ = started[index]
            asked += len(client.wait_asked(run_id, QUESTIONS))
            if index == BRIDGES - 1:
                continue
            answer = bridge.response(msg_id, timeout=WAIT)
            if run_id.startswith("held"):
                assert answer["error"]["data"]["status"] == "cancelled", answer
                withdrawn = {m["params"]["id"] for m in bridge.seen if m.get("method") == "$/cancelRequest"}
                assert {r["id"] for r in client.asked[run_id]} <= withdrawn, "each held request was withdrawn"
                resolved = [m for m in bridge.run_messages(run_id) if m["type"] == "permission.resolved"]
                assert len(resolved) == QUESTIONS and {m["content"]["decision"] for m in resolved} == {
                    "cancelled"
                }
                assert not [m for m in bridge.run_messages(run_id) if m["type"] == "tool.completed"]
            else:
                _check_run(bridge, client, run_id, answer)
        assert asked == BRIDGES * CONVERSATIONS * QUESTIONS

        for bridge, _, answers in started[:-1]:
            counts = _agent_answers(answers, CONVERSATIONS * QUESTIONS)
            assert len(counts) == CONVERSATIONS * QUESTIONS, f"{len(counts)} questions answered"
            assert set(counts.values()) == {1}, "every question answered exactly once"
            assert bridge.call("pi/runs", {})["result"]["runs"] == []
        assert set(_agent_answers(gone_answers, 0).values()) <= {1}, "never twice, even as the bridge went"
    finally:
        for bridge, _, _ in started:
            bridge.close()
