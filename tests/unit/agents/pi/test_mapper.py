"""The pi event mapper: golden streams on real captures of both formats, and synthetic edge cases."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.contract import ShutdownReceipt, pi_message_adapter
from tests.support.env import ROOT
from tests.support.streams import assert_stream_invariants

FIXTURES = ROOT / "tests" / "fixtures"
CAPTURES = sorted((FIXTURES / "pi-captures").glob("*/*.jsonl*"))
GOLDEN = FIXTURES / "golden"


def read_capture(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def final_text_of(data: bytes) -> str:
    """pi's own final text: the text parts of every assistant message_end, in order."""
    text = []
    for line in data.split(b"\n"):
        if b'"message_end"' not in line:
            continue
        event = orjson.loads(line)
        message = event.get("message", {})
        if event.get("type") == "message_end" and message.get("role") == "assistant":
            text += [p["text"] for p in message.get("content", []) if p.get("type") == "text"]
    return "".join(text)


def map_capture(data: bytes, exit_code: int = 0, **options: Any) -> tuple[PiEventMapper, list[Out]]:
    mapper = PiEventMapper(RunOptions(prompt="x", cwd="/", **options))
    outs: list[Out] = []
    for line in data.split(b"\n"):
        if line:
            outs += mapper.feed(line)
    outs += mapper.finish_exited(exit_code, None, "")
    return mapper, outs


def stamped(outs: list[Out]) -> list[dict[str, Any]]:
    return [
        {"runId": "r", "attempt": 1, "seq": index, "type": out.type, "content": out.content}
        for index, out in enumerate(outs, 1)
    ]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_capture_maps_to_its_golden_stream(path: Path) -> None:
    data = read_capture(path)
    mapper, outs = map_capture(data)
    messages = stamped(outs)
    for message in messages:
        pi_message_adapter().validate_python(message)
    assert_stream_invariants(messages)
    terminal = messages[-1]
    if terminal["type"] == "terminal.completed":
        assert mapper.text == final_text_of(data), "deltas must concatenate to pi's final text"
    golden_path = GOLDEN / path.parent.name / (path.name.split(".")[0] + ".json")
    assert_matches_golden([[m["type"], m["content"]] for m in messages], golden_path)


def assert_matches_golden(value: object, golden_path: Path) -> None:
    """Compare with the golden file; UPDATE_GOLDENS=1 rewrites it instead. A missing golden is a
    failure (a new capture must be looked at once, then approved with UPDATE_GOLDENS=1)."""
    if os.environ.get("UPDATE_GOLDENS") == "1":
        golden_path.parent.mkdir(parents=True, exist_ok=True)
        golden_path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n")
    assert golden_path.exists(), (
        f"no golden {golden_path.name}: check the stream, then run with UPDATE_GOLDENS=1"
    )
    assert value == json.loads(golden_path.read_text())


def test_a_missing_golden_fails_unless_update_goldens_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = tmp_path / "1.6.0" / "new_capture.json"
    monkeypatch.delenv("UPDATE_GOLDENS", raising=False)
    with pytest.raises(AssertionError, match=r"no golden new_capture\.json"):
        assert_matches_golden([["assistant", {"text": "hi"}]], golden)
    assert not golden.exists(), "a failing comparison writes nothing"
    monkeypatch.setenv("UPDATE_GOLDENS", "1")
    assert_matches_golden([["assistant", {"text": "hi"}]], golden)
    monkeypatch.delenv("UPDATE_GOLDENS")
    assert_matches_golden([["assistant", {"text": "hi"}]], golden)
    with pytest.raises(AssertionError):
        assert_matches_golden([["assistant", {"text": "changed"}]], golden)


@pytest.mark.parametrize("version", ["0.73.1", "1.6.0"])
def test_model_error_ends_failed_and_retryable(version: str) -> None:
    name = "err500_noretry.jsonl"
    _, outs = map_capture(read_capture(FIXTURES / "pi-captures" / version / name))
    assert outs[-1].type == "terminal.failed"
    assert outs[-1].content["error"]["kind"] == "server" and outs[-1].content["error"]["retryable"]


def test_pi_auto_retry_ends_the_attempt_at_the_first_failure() -> None:
    mapper, outs = map_capture(read_capture(FIXTURES / "pi-captures" / "0.73.1" / "err500.jsonl"))
    assert [o.type for o in outs].count("terminal.failed") == 1
    assert mapper.wants_stop


def test_thought_comes_whole_before_the_tool_call() -> None:
    lines = [
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
        *[
            {"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta", "delta": d}}
            for d in ("I ", "should ", "look.")
        ],
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "Looking."}},
        {
            "type": "message_end",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
        },
        {"type": "tool_execution_start", "toolCallId": "t", "toolName": "bash", "args": {"command": "ls"}},
        {"type": "tool_execution_end", "toolCallId": "t", "toolName": "bash", "result": {"content": []}},
        {"type": "agent_end"},
    ]
    _, outs = map_capture(b"\n".join(orjson.dumps(line) for line in lines))
    kinds = [o.type for o in outs]
    assert kinds == ["assistant", "assistant.thought", "tool.call", "tool.completed", "terminal.completed"]
    assert outs[1].content["text"] == "I should look."


def test_cross_turn_replay_is_never_repeated() -> None:
    """The article's older pi: after a tool turn the next message restarts from the beginning."""

    def update(delta: str) -> dict[str, Any]:
        return {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": delta}}

    def end(text: str) -> dict[str, Any]:
        return {
            "type": "message_end",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }

    start = {"type": "message_start", "message": {"role": "assistant", "content": []}}
    lines = [
        start, update("Let me "), update("check."), end("Let me check."),
        {"type": "tool_execution_start", "toolCallId": "t", "toolName": "bash", "args": {}},
        {"type": "tool_execution_end", "toolCallId": "t", "toolName": "bash", "result": {"content": []}},
        start, update("Let me che"), update("ck. It "), update("works."), end("Let me check. It works."),
        {"type": "agent_end"},
    ]  # fmt: skip
    mapper, outs = map_capture(b"\n".join(orjson.dumps(line) for line in lines))
    deltas = [o.content["text"] for o in outs if o.type == "assistant"]
    assert "".join(deltas) == "Let me check. It works."
    assert outs[-1].content["text"] == "Let me check. It works."


def test_snapshot_only_updates_stream_the_difference() -> None:
    def snap(text: str) -> dict[str, Any]:
        return {
            "type": "message_update",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }

    lines = [
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
        snap("He"), snap("Hello"), snap("Hello"), snap("Hello world"),
        {"type": "message_end", "message": {"role": "assistant", "content": [{"type": "text", "text": "Hello world!"}]}},
        {"type": "agent_end"},
    ]  # fmt: skip
    _, outs = map_capture(b"\n".join(orjson.dumps(line) for line in lines))
    assert [o.content["text"] for o in outs if o.type == "assistant"] == ["He", "llo", " world", "!"]


def test_cancel_closes_open_tools_and_delivers_buffered_thoughts() -> None:
    mapper = PiEventMapper(RunOptions(prompt="x", cwd="/"))
    lines = [
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
        {"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta", "delta": "hmm"}},
    ]
    for line in lines:
        mapper.feed(orjson.dumps(line))
    receipt = ShutdownReceipt(stage="interrupted", elapsed_ms=12.0, pids=[1], survivors=[])
    outs = mapper.finish_cancelled(receipt)
    assert [o.type for o in outs] == ["assistant.thought", "terminal.cancelled"]
    assert mapper.finish_cancelled(receipt) == [] and mapper.finish_exited(0, None, "") == []


def test_out_of_order_and_unknown_events_never_raise() -> None:
    mapper = PiEventMapper(RunOptions(prompt="x", cwd="/"))
    lines = [
        b'{"type":"message_end","message":{"role":"assistant","content":"plain"}}',
        b'{"type":"tool_execution_end","toolCallId":"z","isError":true,"result":{"content":[{"type":"text","text":"boom"}]}}',
        b'{"type":"something_new"}',
        b"not json",
        b"[]",
        b'{"type":"message_update","assistantMessageEvent":"weird"}',
    ]
    outs = [out for line in lines for out in mapper.feed(line)]
    outs += mapper.finish_exited(1, None, "bad things\n")
    assert [o.type for o in outs] == ["assistant", "tool.call", "tool.failed", "terminal.failed"]
    assert mapper.unknown_events["something_new"] == 1
    assert outs[-1].content["error"]["invalidOutputLines"] == ["not json", "[]"]


def test_fast_scan_of_073_updates_agrees_with_a_full_parse() -> None:
    from bridge.agents.pi.mapper import _scan_update

    seen = 0
    for path in (FIXTURES / "pi-captures" / "0.73.1").glob("*.jsonl*"):
        for line in read_capture(path).split(b"\n"):
            scanned = _scan_update(line)
            if scanned is None:
                continue
            seen += 1
            update = orjson.loads(line)["assistantMessageEvent"]
            has_text = update["type"] in ("text_delta", "thinking_delta")
            assert scanned == (update["type"], update["delta"] if has_text else None)
    assert seen > 1000
    tricky = {"type": "text_delta", "contentIndex": 0, "delta": 'a"b\\\\"c\\', "partial": {"x": 'y"'}}
    line = orjson.dumps({"type": "message_update", "assistantMessageEvent": tricky, "message": {}})
    assert _scan_update(line) == ("text_delta", 'a"b\\\\"c\\')
    assert (
        _scan_update(b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"cut')
        is None
    )


def _todo_end(details: Any, name: str = "todo") -> bytes:
    result = {"content": [{"type": "text", "text": "ok"}], "details": details}
    return orjson.dumps(
        {"type": "tool_execution_end", "toolCallId": "t1", "toolName": name, "result": result}
    )


def test_the_plan_tool_s_list_becomes_the_contract_s_plan_and_other_shapes_none() -> None:
    todos = [{"id": 1, "text": "Read the parser", "done": True}, {"id": 2, "text": "Fix it", "done": False}]
    mapper = PiEventMapper(RunOptions(prompt="x", cwd="/"))
    outs = mapper.feed(_todo_end({"action": "toggle", "todos": todos, "nextId": 3}))
    plans = [out.content for out in outs if out.type == "plan"]
    assert plans == [
        {
            "entries": [
                {"content": "Read the parser", "status": "completed"},
                {"content": "Fix it", "status": "pending"},
            ]
        }
    ]
    pi_message_adapter().validate_python(stamped([out for out in outs if out.type == "plan"])[0])
    cleared = mapper.feed(_todo_end({"action": "clear", "todos": [], "nextId": 1}))
    assert [o.content for o in cleared if o.type == "plan"] == [{"entries": []}], (
        "a cleared list: an empty plan"
    )
    for other in (_todo_end({"items": todos}), _todo_end(None), _todo_end({"todos": todos}, name="bash")):
        assert "plan" not in [o.type for o in mapper.feed(other)]
