"""Hostile input to `pi-bridge acp`: every bad frame gets a clear JSON-RPC error, stdout carries
nothing but frames, and the connection keeps serving."""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp import schema

from tests.support.acp import RawAcp
from tests.support.env import WAIT, requires_pi
from tests.support.leaks import no_run_processes

pytestmark = [requires_pi]


@pytest.fixture
def raw_acp(pi_agent_dir: Path, tmp_path: Path) -> Iterator[RawAcp]:
    bridge = RawAcp(pi_agent_dir, tmp_path)
    answer = bridge.request("initialize", {"protocolVersion": 1})
    assert answer["result"]["protocolVersion"] == 1
    yield bridge
    assert bridge.close() == 0
    assert bridge.not_frames == [], "stdout carries JSON-RPC frames only"
    no_run_processes(timeout=3, where="after the hostile-input bridge")


def _error(frame: dict[str, Any]) -> dict[str, Any]:
    assert "error" in frame, frame
    error = frame["error"]
    assert isinstance(error["code"], int) and error["message"]
    return error  # type: ignore[no-any-return]


def _still_serving(bridge: RawAcp, cwd: Path) -> None:
    assert "sessions" in bridge.request("session/list", {"cwd": str(cwd)})["result"]


def test_acp_first_initialize_answered_by_hand_equals_the_sdk_answer(raw_acp: RawAcp) -> None:
    # raw_acp's own initialize was the first frame (answered before the SDK loads); this one is
    # the SDK's (only the first frame is answered by hand)
    by_hand = next(f for f in raw_acp.frames if f.get("id") == 1001)
    by_sdk = raw_acp.request("initialize", {"protocolVersion": 1})
    assert by_hand == {**by_sdk, "id": 1001}
    schema.InitializeResponse.model_validate(by_hand["result"])
    newer = raw_acp.request("initialize", {"protocolVersion": 9, "clientInfo": {"name": "x", "version": "1"}})
    assert newer["result"] == by_sdk["result"], "the agent answers the version it speaks"


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}', "result"),
        (b"not json", -32700),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}',
            "result",
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1,'
            b' "_meta": {"piBridge": {"retry": {"maxAttempts": 0}}}}}',
            -32602,
        ),
    ],
)
def test_acp_a_first_frame_that_is_no_plain_initialize_is_the_sdk_path_s_and_serving_goes_on(
    pi_agent_dir: Path, tmp_path: Path, first: bytes, expected: str | int
) -> None:
    bridge = RawAcp(pi_agent_dir, tmp_path)
    try:
        bridge.send_line(first)
        frame = bridge.wait(lambda f: "method" not in f)
        if expected == "result":
            assert "result" in frame and frame["id"] == 1, frame
        else:
            assert _error(frame)["code"] == expected
        answer = bridge.request("initialize", {"protocolVersion": 1})
        assert answer["result"]["agentInfo"]["name"] == "pi-bridge"
        _still_serving(bridge, tmp_path)
    finally:
        assert bridge.close() == 0
    assert bridge.not_frames == []


def test_acp_a_first_initialize_split_across_writes_is_answered(pi_agent_dir: Path, tmp_path: Path) -> None:
    bridge = RawAcp(pi_agent_dir, tmp_path)
    try:
        line = json.dumps(
            {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": 1}}
        )
        assert bridge.proc.stdin is not None
        bridge.proc.stdin.write(line[:20].encode())
        bridge.proc.stdin.write(line[20:].encode() + b"\n")
        assert bridge.wait(lambda f: f.get("id") == 5)["result"]["protocolVersion"] == 1
        _still_serving(bridge, tmp_path)
    finally:
        assert bridge.close() == 0


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_acp_eof_or_sigterm_as_pi_starts_while_the_sdk_loads_leaves_nothing(
    pi_agent_dir: Path, tmp_path: Path, how: str
) -> None:
    bridge = RawAcp(pi_agent_dir, tmp_path)
    assert bridge.request("initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
    deadline = time.monotonic() + WAIT
    while not psutil.Process(bridge.pid).children():  # the pre-spawned pi, started first
        assert time.monotonic() < deadline, "no pi was pre-spawned"
        time.sleep(0.01)
    if how == "eof":
        assert bridge.close() == 0
    else:
        bridge.proc.send_signal(signal.SIGTERM)
        assert bridge.proc.wait(WAIT) == 0
    no_run_processes(timeout=3, where=f"after {how} as pi started")


def test_acp_non_json_and_non_request_frames_get_parse_and_invalid_request_errors(
    raw_acp: RawAcp, tmp_path: Path
) -> None:
    cases: list[tuple[bytes, int]] = [
        (b"not json at all", -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700),
        (b"\xff\xfe garbage bytes", -32700),
        (b"[1, 2, 3]", -32600),
        (b"42", -32600),
        (b'"a string"', -32600),
        (b'{"id": 7, "method": "initialize"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 8, "method": 5}', -32600),
        (b'{"jsonrpc": "2.0", "id": {"no": 1}, "method": "session/list"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": "cwd"}', -32600),
        (b'{"jsonrpc": "2.0"}', -32600),
    ]
    for line, code in cases:
        seen = len([f for f in raw_acp.frames if "error" in f and f["error"]["code"] == code])
        raw_acp.send_line(line)
        _still_serving(raw_acp, tmp_path)  # answered after the bad frame's own error (one reader)
        now = len([f for f in raw_acp.frames if "error" in f and f["error"]["code"] == code])
        assert now == seen + 1, f"{line!r} gets exactly one {code} error"
    codes = [f["error"]["code"] for f in raw_acp.frames if "error" in f]
    assert codes.count(-32700) == 3 and codes.count(-32600) == 8
    answered = {f.get("id") for f in raw_acp.frames if "error" in f}
    assert {7, 8, 9} <= answered, "an invalid request with a usable id is answered under that id"


def test_acp_unknown_methods_and_wrong_params_get_clear_errors(raw_acp: RawAcp, tmp_path: Path) -> None:
    assert _error(raw_acp.request("no/such/method", {}))["code"] == -32601
    assert _error(raw_acp.request("_pi/unknown", {}))["code"] == -32601
    wrong = _error(raw_acp.request("session/new", {"cwd": 5, "mcpServers": []}))
    assert wrong["code"] == -32602 and "cwd" in wrong["message"]
    relative = _error(raw_acp.request("session/new", {"cwd": "relative/dir", "mcpServers": []}))
    assert relative["code"] == -32602 and "absolute" in relative["message"]
    assert _error(raw_acp.request("session/prompt", [1, 2]))["code"] == -32602
    missing = _error(raw_acp.request("session/prompt", {"sessionId": "s"}))
    assert missing["code"] == -32602 and "prompt" in missing["message"]
    assert _error(raw_acp.request("session/set_config_option", {}))["code"] == -32602
    assert _error(raw_acp.request("authenticate", {"methodId": "x"}))["code"] == -32602
    steer = _error(raw_acp.request("_pi/steer", {"sessionId": 3}))
    assert steer["code"] == -32602
    _still_serving(raw_acp, tmp_path)


def test_acp_prompt_for_an_unknown_session_and_cancel_of_a_finished_prompt_are_errors(
    raw_acp: RawAcp, tmp_path: Path
) -> None:
    block = [{"type": "text", "text": "hi"}]
    unknown = _error(raw_acp.request("session/prompt", {"sessionId": "nope", "prompt": block}))
    assert unknown["code"] == -32002 and "nope" in unknown["message"]
    session_id = raw_acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
        "sessionId"
    ]
    assert raw_acp.request("session/prompt", {"sessionId": session_id, "prompt": block})["result"][
        "stopReason"
    ] == ("end_turn")
    finished = _error(raw_acp.request("session/cancel", {"sessionId": session_id}))
    assert finished["code"] == -32602 and "no running prompt" in finished["message"]
    raw_acp.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
    raw_acp.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "nope"}})
    raw_acp.send({"jsonrpc": "2.0", "method": "session/cancel", "params": 17})
    answer = raw_acp.request("session/prompt", {"sessionId": session_id, "prompt": block})
    assert answer["result"]["stopReason"] == "end_turn", "the session serves after stray cancels"


def _fuzz_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(8 if depth < 3 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.randint(-(2**40), 2**40)
    if choice == 3:
        return rng.choice(["", "x" * rng.randrange(100), "\u2028\u0000\ud7ff", "session/prompt", "_pi/steer"])
    if choice == 4:
        return rng.random()
    if choice == 5:
        return [_fuzz_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [
        "jsonrpc",
        "id",
        "method",
        "params",
        "sessionId",
        "prompt",
        "cwd",
        "result",
        "error",
        "type",
        "text",
    ]
    return {rng.choice(keys): _fuzz_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _fuzz_frame(rng: random.Random) -> bytes:
    methods = ["initialize", "session/new", "session/prompt", "session/load", "session/list", "session/cancel",
               "session/set_config_option", "session/close", "_pi/steer", "authenticate", "x"]  # fmt: skip
    kind = rng.randrange(4)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).replace(b"\n", b" ")
    if kind == 1:
        return json.dumps(_fuzz_value(rng)).encode()
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": rng.choice(methods), "params": _fuzz_value(rng)}
    if kind == 2:
        frame["id"] = rng.choice([rng.randint(0, 10**6), "fuzz", None])
    if rng.random() < 0.3 and isinstance(frame["params"], dict):
        frame["params"]["sessionId"] = "fuzz-session"
    return json.dumps(frame).encode()


def test_acp_fuzzed_frames_never_break_the_connection(raw_acp: RawAcp, tmp_path: Path) -> None:
    rng = random.Random(12)
    for _ in range(300):
        raw_acp.send_line(_fuzz_frame(rng))
    raw_acp.send_line(b"x" * (2 * 1024 * 1024))  # one 2 MiB garbage line
    _still_serving(raw_acp, tmp_path)
    assert raw_acp.proc.poll() is None
    for frame in raw_acp.frames:
        if "error" in frame:
            assert isinstance(frame["error"]["code"], int) and frame["error"]["message"]
