"""The ACP agents' mapper and permission answers, on session/update lines as the agents send them."""

from __future__ import annotations

from typing import Any

import orjson
from acp import schema

from bridge.agents.acp import classify_exit
from bridge.agents.acp.live import _permission_answer, tool_check
from bridge.agents.acp.mapper import AcpEventMapper
from bridge.agents.acp.replay import Replay
from bridge.agents.values import Out, RunOptions, ToolVerdict
from bridge.contract import pi_message_adapter


def _update(update: dict[str, Any]) -> bytes:
    params = {"sessionId": "s1", "update": update}
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})


def _chunk(kind: str, text: str) -> bytes:
    return _update({"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def _mapper() -> AcpEventMapper:
    return AcpEventMapper(RunOptions(prompt="p", cwd="/w"), "pi (pi-acp)", classify_exit)


def _feed(mapper: AcpEventMapper, *lines: bytes) -> list[Out]:
    out: list[Out] = []
    for line in lines:
        out += mapper.feed(line)
    return out


def _types(out: list[Out]) -> list[str]:
    return [o.type for o in out]


def test_chunks_thoughts_and_a_tool_call_map_in_order_and_validate() -> None:
    mapper = _mapper()
    out = _feed(
        mapper,
        b'{"type":"session","id":"s1","cwd":"/w"}',
        _chunk("agent_thought_chunk", "think "),
        _chunk("agent_thought_chunk", "more"),
        _chunk("agent_message_chunk", "Let me run it."),
        _update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "c1",
                "title": "echo hi",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": "echo hi"},
            }
        ),
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c1",
                "status": "in_progress",
                "_meta": {"terminal_output": {"terminal_id": "c1", "data": "hi\n"}},
            }
        ),
        _update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}),
        _chunk("agent_message_chunk", "Done."),
        b'{"type":"prompt_end","stopReason":"end_turn"}',
    )
    assert _types(out) == [
        "session.started",
        "assistant.thought",
        "assistant",
        "tool.call",
        "tool.completed",
        "assistant",
        "terminal.completed",
    ]
    assert out[1].content["text"] == "think more", "the thought whole, before the text"
    assert out[3].content == {"toolCallId": "c1", "name": "bash", "arguments": {"command": "echo hi"}}
    assert out[4].content["output"] == "hi\n", "pi-acp's terminal output is the tool's output"
    assert out[-1].content == {"text": "Let me run it.Done.", "stopReason": "stop"}
    for index, message in enumerate(out, 1):
        pi_message_adapter().validate_python(
            {"runId": "r", "attempt": 1, "seq": index, "type": message.type, "content": message.content}
        )


def test_a_failed_tool_an_open_tool_and_a_failed_prompt() -> None:
    mapper = _mapper()
    out = _feed(
        mapper,
        _update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "a",
                "title": "Write",
                "kind": "edit",
                "_meta": {"claudeCode": {"toolName": "Write"}},
            }
        ),
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "a",
                "status": "failed",
                "content": [{"type": "content", "content": {"type": "text", "text": "denied"}}],
            }
        ),
        _update({"sessionUpdate": "tool_call", "toolCallId": "b", "kind": "read"}),
        b'{"type":"prompt_end","error":{"code":-32603,"message":"boom"}}',
    )
    assert _types(out) == ["tool.call", "tool.failed", "tool.call", "tool.failed", "terminal.failed"]
    assert out[0].content["name"] == "Write" and out[1].content["error"] == "denied"
    error = out[-1].content["error"]
    assert error["kind"] == "model" and error["retryable"] is True and "boom" in error["message"]
    assert mapper.feed(_chunk("agent_message_chunk", "late")) == [], "nothing after the terminal"


def test_an_agent_killed_mid_turn_is_a_retryable_process_failure() -> None:
    mapper = _mapper()
    _feed(mapper, _chunk("agent_message_chunk", "par"))
    [terminal] = mapper.finish_exited(None, "SIGKILL", "")
    assert terminal.type == "terminal.failed"
    error = terminal.content["error"]
    assert error["kind"] == "process" and error["retryable"] is True
    assert "killed by SIGKILL" in error["message"] and terminal.content["text"] == "par"


def test_a_permission_verdict_picks_a_once_option_never_an_always_one() -> None:
    asked = schema.RequestPermissionRequest.model_validate(
        {
            "sessionId": "s1",
            "toolCall": {
                "toolCallId": "t1",
                "title": "Write",
                "kind": "edit",
                "rawInput": {"file_path": "/w/a.txt", "content": "x"},
            },
            "options": [
                {"optionId": "always", "name": "Always", "kind": "allow_always"},
                {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                {"optionId": "no", "name": "No", "kind": "reject_once"},
            ],
        }
    )
    check = tool_check(asked)
    assert (check.kind, check.path, check.tool) == ("edit", "/w/a.txt", "Write")
    answer = _permission_answer(7, asked)
    allowed = orjson.loads(answer(ToolVerdict(allow=True)))
    rejected = orjson.loads(answer(ToolVerdict(allow=False, reason="no")))
    assert allowed == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"outcome": {"outcome": "selected", "optionId": "yes"}},
    }
    assert rejected["result"]["outcome"] == {"outcome": "selected", "optionId": "no"}


def test_a_plan_maps_to_the_plan_message_and_usage_to_the_turns_end() -> None:
    mapper = _mapper()
    entries = [
        {"content": "read the code", "status": "completed", "priority": "high"},
        {"content": "write the fix", "status": "in_progress", "priority": "medium"},
        {"content": "odd", "status": "someday"},
        {"status": "pending"},
    ]
    usage = {
        "inputTokens": 12,
        "outputTokens": 5,
        "totalTokens": 17,
        "cachedReadTokens": 2,
        "thoughtTokens": 1,
    }
    out = _feed(
        mapper,
        b'{"type":"session","id":"s1","cwd":"/w"}',
        _update({"sessionUpdate": "plan", "entries": entries}),
        _update(
            {
                "sessionUpdate": "usage_update",
                "used": 300,
                "size": 1200,
                "cost": {"amount": 0.5, "currency": "USD"},
            }
        ),
        _chunk("agent_message_chunk", "done"),
        orjson.dumps({"type": "prompt_end", "stopReason": "end_turn", "usage": usage}),
    )
    assert _types(out) == ["session.started", "plan", "assistant", "terminal.completed"]
    assert out[1].content == {
        "entries": [
            {"content": "read the code", "status": "completed", "priority": "high"},
            {"content": "write the fix", "status": "in_progress", "priority": "medium"},
            {"content": "odd", "status": "pending"},
        ]
    }
    end = out[-1].content
    assert end["usage"] == {"input": 12, "output": 5, "totalTokens": 17, "cacheRead": 2}
    assert end["contextUsage"] == {"tokens": 300, "contextWindow": 1200, "percent": 25.0}
    assert end["sessionCost"] == 0.5
    for seq, o in enumerate(out, 1):
        pi_message_adapter().validate_python(
            {"type": o.type, "runId": "r", "attempt": 1, "seq": seq, "content": o.content}
        )


def test_a_loaded_sessions_replay_becomes_its_turns_each_call_once() -> None:
    """pi-acp's replay (session/load): a finished call announced done, then its update with the
    output; chunks merged into one text per message; a turn per user message."""
    replay = Replay()
    text = {"type": "text", "text": ""}
    for update in (
        {"sessionUpdate": "user_message_chunk", "content": {**text, "text": "Run echo hi"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {**text, "text": "I will run it"}},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "echo hi",
            "kind": "execute",
            "status": "completed",
            "rawOutput": {"role": "toolResult"},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "_meta": {"terminal_output": {"terminal_id": "c1", "data": "hi\n"}},
        },
        {"sessionUpdate": "agent_message_chunk", "content": {**text, "text": "It said "}},
        {"sessionUpdate": "agent_message_chunk", "content": {**text, "text": "hi."}},
        {"sessionUpdate": "user_message_chunk", "content": {**text, "text": "Again"}},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c2",
            "title": "read",
            "kind": "read",
            "status": "failed",
            "rawOutput": "no such file",
        },
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
    ):
        replay.feed(update)
    history = replay.history("s1", "/w")
    assert history is not None and history.title == "Run echo hi"
    turns = [
        (t.prompt, [(m.type, m.content.model_dump(by_alias=True, exclude_none=True)) for m in t.messages])
        for t in history.turns
    ]
    assert turns == [
        (
            "Run echo hi",
            [
                ("assistant.thought", {"text": "I will run it"}),
                ("tool.call", {"toolCallId": "c1", "name": "bash", "arguments": {}}),
                ("tool.completed", {"toolCallId": "c1", "name": "bash", "output": "hi\n"}),
                ("assistant", {"text": "It said hi."}),
            ],
        ),
        (
            "Again",
            [
                ("tool.call", {"toolCallId": "c2", "name": "read", "arguments": {}}),
                ("tool.failed", {"toolCallId": "c2", "name": "read", "error": "no such file"}),
            ],
        ),
    ]
    assert Replay().history("s1", "/w") is None, "nothing replayed is no history"
