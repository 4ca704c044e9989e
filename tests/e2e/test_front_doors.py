"""What both fronts refuse at the door, before anything runs (real pi, scripted model): a lone
surrogate anywhere in a frame, an id that cannot be answered under, a frame nested too deeply.
A whole emoji spelled as its UTF-16 pair still goes through."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.fronts.lsp.writer import frame
from bridge.scripted_model import ScriptedModelServer
from tests.support.acp import RawAcp
from tests.support.env import ROOT, requires_pi
from tests.support.raw import RawBridge

pytestmark = [requires_pi]

LONE = "\ud83d"  # the first half of 😀
PAIR = "\ud83d\ude00"  # 😀 as its UTF-16 pair: one character once parsed


def send_escaped(bridge: RawBridge, payload: Any) -> None:
    """One LSP frame of JSON with every non-ASCII character escaped (a lone surrogate as \\ud83d)."""
    bridge.send_bytes(frame(json.dumps(payload).encode()))


def model_saw(scripted_model: ScriptedModelServer, tag: str) -> bool:
    """Whether any request the scripted model received carried `tag`."""
    return any(tag in json.dumps(r["body"]) for r in scripted_model.requests)


def session_files(pi_agent_dir: Path) -> set[Path]:
    """Every session file pi has written."""
    return set((pi_agent_dir / "sessions").rglob("*.jsonl"))


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert "error" in answer, answer
    error: dict[str, Any] = answer["error"]
    return error


@pytest.fixture
def lsp(pi_agent_dir: Path) -> Iterator[RawBridge]:
    """An LSP-front bridge on the real pi with no pre-spawned pi: every pi is a run's."""
    bridge = RawBridge()
    bridge.initialize({"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False})
    yield bridge
    bridge.close()


def good_run(bridge: RawBridge, prompt: str = "hi") -> dict[str, Any]:
    """A run that must complete: a barrier (frames are handled in the order they came)."""
    result: dict[str, Any] = bridge.call("pi/run", {"prompt": prompt, "provider": "fake", "model": "echo"})[
        "result"
    ]
    assert result["status"] == "completed", result
    return result


def assert_nothing_ran(bridge: RawBridge, scripted_model: ScriptedModelServer, tag: str, run_id: str) -> None:
    """No run `run_id` was started: no message, not listed, and the model never saw `tag`."""
    assert bridge.run_messages(run_id) == []
    assert run_id not in [r["runId"] for r in bridge.call("pi/runs", {})["result"]["runs"]]
    assert not model_saw(scripted_model, tag), "the refused prompt reached the model"


@pytest.mark.parametrize("bad_id", [[7], {"n": 7}, True], ids=["array", "object", "bool"])
def test_a_pi_run_whose_id_cannot_be_answered_under_is_refused_before_anything_runs(
    lsp: RawBridge, scripted_model: ScriptedModelServer, pi_agent_dir: Path, bad_id: Any
) -> None:
    tag, run_id = f"door-{uuid.uuid4().hex}", f"bad-id-{uuid.uuid4().hex[:8]}"
    before = session_files(pi_agent_dir)
    params = {"prompt": tag, "provider": "fake", "model": "echo", "runId": run_id}
    lsp.send({"jsonrpc": "2.0", "id": bad_id, "method": "pi/run", "params": params})
    good_run(lsp)
    [refused] = lsp.errors_with_null_id()
    assert refused["error"]["code"] == -32600 and "id" in refused["error"]["message"], refused
    assert_nothing_ran(lsp, scripted_model, tag, run_id)
    assert len(session_files(pi_agent_dir) - before) == 1, "pi wrote only the barrier run's session"
    lsp.send({"jsonrpc": "2.0", "id": bad_id, "method": "pi/runs", "params": {}})
    good_run(lsp)
    assert [e["error"]["code"] for e in lsp.errors_with_null_id()] == [-32600, -32600]


@pytest.mark.parametrize("method", ["pi/run", "pi/runs"])
def test_an_id_holding_a_lone_surrogate_is_refused_with_id_null_and_nothing_runs(
    lsp: RawBridge, scripted_model: ScriptedModelServer, pi_agent_dir: Path, method: str
) -> None:
    tag, run_id = f"door-{uuid.uuid4().hex}", f"lone-id-{uuid.uuid4().hex[:8]}"
    params = (
        {"prompt": tag, "provider": "fake", "model": "echo", "runId": run_id} if method == "pi/run" else {}
    )
    send_escaped(lsp, {"jsonrpc": "2.0", "id": f"x{LONE}", "method": method, "params": params})
    good_run(lsp)
    [refused] = lsp.errors_with_null_id()
    assert refused["error"]["code"] == -32600, refused
    assert "id" in refused["error"]["message"] and "lone surrogate" in refused["error"]["message"]
    assert_nothing_ran(lsp, scripted_model, tag, run_id)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"prompt": f"say {LONE}"}, "prompt"),
        ({"prompt": "hi", "tools": ["read", f"ba{LONE}sh"]}, "tools.1"),
        ({"prompt": "hi", f"x{LONE}": 1}, "x\\ud83d"),
    ],
    ids=["prompt", "a tool", "a key"],
)
def test_a_lone_surrogate_in_run_params_is_invalid_params_naming_the_field(
    lsp: RawBridge, scripted_model: ScriptedModelServer, params: dict[str, Any], field: str
) -> None:
    tag = f"door-{uuid.uuid4().hex}"
    msg_id = lsp.new_id()
    request = {**params, "prompt": f"{tag} {params['prompt']}", "provider": "fake", "model": "echo"}
    send_escaped(lsp, {"jsonrpc": "2.0", "id": msg_id, "method": "pi/run", "params": request})
    error = error_of(lsp.response(msg_id))
    assert error["code"] == -32602, error
    assert error["message"].startswith(f"invalid params: {field}: holds a lone surrogate"), error
    good_run(lsp)
    assert not model_saw(scripted_model, tag)


def test_initialization_options_holding_a_lone_surrogate_are_refused_naming_the_field(
    pi_agent_dir: Path,
) -> None:
    """An env value with half an emoji would reach pi's environment, which no run can start with
    (was: accepted; every run then failed as `internal`, the rpc engine's with no terminal)."""
    bridge = RawBridge()
    try:
        options = {
            "env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir), "NOTE": f"half {LONE}"},
            "warmPool": False,
        }
        params = {"processId": os.getpid(), "rootUri": ROOT.as_uri(), "capabilities": {}}
        send_escaped(
            bridge,
            {
                "jsonrpc": "2.0",
                "id": "first",
                "method": "initialize",
                "params": {**params, "initializationOptions": options},
            },
        )
        error = error_of(bridge.response("first"))
        assert error["code"] == -32602, error
        assert error["message"].startswith("invalid params: initializationOptions.env.NOTE: holds a lone"), (
            error
        )
        bridge.initialize({"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False})
        good_run(bridge)
    finally:
        bridge.close()


def test_a_whole_emoji_spelled_as_its_surrogate_pair_goes_through(lsp: RawBridge) -> None:
    msg_id = lsp.new_id()
    params = {"prompt": f"emoji {PAIR}!", "provider": "fake", "model": "echo"}
    send_escaped(lsp, {"jsonrpc": "2.0", "id": msg_id, "method": "pi/run", "params": params})
    result = lsp.response(msg_id)["result"]
    assert result["status"] == "completed" and result["text"] == "ECHO:emoji \U0001f600!", result


@pytest.mark.parametrize("depth", [5_000, 300_000], ids=["parsed on the loop", "parsed aside"])
def test_a_frame_nested_too_deeply_is_a_parse_error_and_serving_goes_on(lsp: RawBridge, depth: int) -> None:
    """(was, for a body big enough to be parsed aside: the bridge took it for the end of its
    input and exited)"""
    lsp.send_bytes(frame(b"[" * depth + b"]" * depth))
    good_run(lsp)
    [error] = lsp.errors_with_null_id()
    assert error["error"]["code"] == -32700, error
    assert lsp.alive()


# --------------------------------------------------------------------------- the ACP front


@pytest.fixture
def acp(pi_agent_dir: Path, tmp_path: Path) -> Iterator[RawAcp]:
    bridge = RawAcp(pi_agent_dir, tmp_path)
    assert bridge.request("initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
    yield bridge
    assert bridge.close() == 0
    assert bridge.not_frames == [], "stdout carries JSON-RPC frames only"


def acp_prompt(bridge: RawAcp, session_id: str, text: str) -> dict[str, Any]:
    """A session/prompt of one text block, sent with every non-ASCII character escaped."""
    blocks = [{"type": "text", "text": text}]
    return bridge.request("session/prompt", {"sessionId": session_id, "prompt": blocks})


def new_echo_session(bridge: RawAcp, cwd: Path) -> str:
    session_id: str = bridge.request("session/new", {"cwd": str(cwd), "mcpServers": []})["result"][
        "sessionId"
    ]
    model = {"sessionId": session_id, "configId": "model", "value": "fake/echo"}
    assert "result" in bridge.request("session/set_config_option", model)
    return session_id


def test_acp_a_prompt_holding_a_lone_surrogate_is_invalid_params_naming_its_block(
    acp: RawAcp, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """(was: -32700 with id null, as if the line were not JSON)"""
    session_id = new_echo_session(acp, tmp_path)
    tag = f"door-{uuid.uuid4().hex}"
    error = error_of(acp_prompt(acp, session_id, f"{tag} {LONE}"))
    assert error["code"] == -32602, error
    assert error["message"].startswith("invalid params: prompt.0.text: holds a lone surrogate"), error
    assert error["data"]["errors"][0]["field"] == "prompt.0.text"
    answer = acp_prompt(acp, session_id, "still here")
    assert answer["result"]["stopReason"] == "end_turn"
    assert not model_saw(scripted_model, tag)


def test_acp_an_id_holding_a_lone_surrogate_is_invalid_request_with_id_null(
    acp: RawAcp, tmp_path: Path
) -> None:
    acp.send({"jsonrpc": "2.0", "id": f"x{LONE}", "method": "session/list", "params": {"cwd": str(tmp_path)}})
    assert "sessions" in acp.request("session/list", {"cwd": str(tmp_path)})["result"]
    [refused] = acp.null_id_errors()
    assert refused["error"]["code"] == -32600 and "id: holds a lone surrogate" in refused["error"]["message"]


def test_acp_a_first_initialize_whose_id_holds_a_lone_surrogate_is_not_answered_under_it(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """The first frame is read before the SDK loads (bridge/fronts/acp/first_frame.py); the same rule holds
    (was: answered by hand, under the unusable id)."""
    bridge = RawAcp(pi_agent_dir, tmp_path)
    try:
        bridge.send({"jsonrpc": "2.0", "id": LONE, "method": "initialize", "params": {"protocolVersion": 1}})
        assert bridge.request("initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
        [refused] = bridge.null_id_errors()
        assert refused["error"]["code"] == -32600, refused
        assert not [f for f in bridge.frames if "result" in f and f.get("id") != 1001]
    finally:
        assert bridge.close() == 0


def test_acp_a_first_line_nested_too_deeply_is_answered_and_serving_goes_on(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """(was: the first-frame reader died on it, and the line, with whatever came behind it in
    the same read, was lost unanswered)"""
    bridge = RawAcp(pi_agent_dir, tmp_path)
    try:
        bridge.send_line(b"[" * 30_000 + b"]" * 30_000)
        assert bridge.request("initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
        [refused] = bridge.null_id_errors()
        assert refused["error"]["code"] == -32700, refused
    finally:
        assert bridge.close() == 0


def test_acp_a_whole_emoji_spelled_as_its_surrogate_pair_reaches_the_model(
    acp: RawAcp, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    session_id = new_echo_session(acp, tmp_path)
    answer = acp_prompt(acp, session_id, f"emoji {PAIR}!")
    assert answer["result"]["stopReason"] == "end_turn", answer
    assert scripted_model.last_user_text("echo") == "emoji \U0001f600!"
    chunks = [
        f["params"]["update"]["content"]["text"]
        for f in acp.frames
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert "".join(chunks) == "ECHO:emoji \U0001f600!"
