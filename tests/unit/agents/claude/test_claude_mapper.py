"""Claude Code's stream-json mapper and command builder, on real captures (2.1.197 against the
scripted model, paths replaced) and on the lines of the faults a real run cannot show on demand."""

from __future__ import annotations

import json
from typing import Any

from bridge.agents.claude.command import launch_spec
from bridge.agents.claude.file_changes import ClaudeFileChangeWatch, hunks_of
from bridge.agents.claude.mapper import ClaudeEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.contract import ShutdownReceipt, pi_message_adapter
from bridge.scripted_model import TEXT_REPLY
from tests.support.env import ROOT

CAPTURES = ROOT / "tests" / "fixtures" / "claude"
OPTIONS = RunOptions(prompt="-p hi", cwd="/home/user/project")


def feed_all(mapper: ClaudeEventMapper, lines: list[bytes]) -> list[Out]:
    out: list[Out] = []
    for line in lines:
        out.extend(mapper.feed(line))
    return out


def capture(name: str) -> list[bytes]:
    return [line for line in (CAPTURES / f"{name}.jsonl").read_bytes().splitlines() if line]


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()  # compact, as Claude Code prints it


def valid(outs: list[Out]) -> list[Out]:
    for seq, out in enumerate(outs, 1):
        pi_message_adapter().validate_python(
            {"runId": "r", "attempt": 1, "seq": seq, "type": out.type, "content": out.content}
        )
    return outs


def test_text_capture_streams_deltas_and_ends_completed_with_usage_cost_and_context() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    outs = valid(feed_all(mapper, capture("text")))
    assert outs[0].type == "session.started" and outs[0].content["cwd"] == "/home/user/project"
    deltas = [o.content["text"] for o in outs if o.type == "assistant"]
    assert len(deltas) > 1 and "".join(deltas) == TEXT_REPLY, "the complete text block repeats nothing"
    terminal = outs[-1]
    assert terminal.type == "terminal.completed" and terminal.content["text"] == TEXT_REPLY
    assert terminal.content["usage"]["input"] > 0 and terminal.content["usage"]["cost"] > 0
    assert terminal.content["contextUsage"]["contextWindow"] == 200000
    assert mapper.session_id == outs[0].content["sessionId"]


def test_tool_capture_opens_and_closes_the_bash_call() -> None:
    outs = valid(feed_all(ClaudeEventMapper(OPTIONS), capture("tool")))
    kinds = [o.type for o in outs]
    assert kinds.index("tool.call") < kinds.index("tool.completed") < kinds.index("terminal.completed")
    call = outs[kinds.index("tool.call")]
    assert call.content["name"] == "Bash" and call.content["arguments"] == {"command": "echo hi"}
    assert outs[kinds.index("tool.completed")].content["output"] == "hi"


def test_is_error_with_subtype_success_is_a_failure_classified_by_its_status() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    result = {
        "type": "result", "subtype": "success", "is_error": True, "api_error_status": 500,
        "result": 'API Error: 500 {"type":"error","error":{"type":"api_error"}}', "session_id": "s",
    }  # fmt: skip
    outs = valid(mapper.feed(line(result)))
    assert outs[-1].type == "terminal.failed"
    assert outs[-1].content["error"]["kind"] == "server" and outs[-1].content["error"]["retryable"] is True
    auth = ClaudeEventMapper(OPTIONS).feed(
        line({**result, "api_error_status": 401, "result": "API Error: 401"})
    )
    assert auth[-1].content["error"]["kind"] == "auth" and auth[-1].content["error"]["retryable"] is False


def test_its_own_retry_ends_the_attempt_failed_and_retryable() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10, "error_status": 529}
    outs = valid(mapper.feed(line(retry)))
    assert mapper.wants_stop is True
    assert outs[-1].type == "terminal.failed"
    assert (
        outs[-1].content["error"]["kind"] == "agent_retry" and outs[-1].content["error"]["retryable"] is True
    )


def test_the_interrupt_result_gives_way_to_the_cancel() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    tool_use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "sleep 30"}}
    feed_all(mapper, [line({"type": "assistant", "message": {"id": "m", "content": [tool_use]}})])
    interrupted = {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                   "content": "The user doesn't want to proceed with this tool use. The tool use was rejected"}  # fmt: skip
    outs = mapper.feed(line({"type": "user", "message": {"role": "user", "content": [interrupted]}}))
    assert outs[0].type == "tool.failed" and outs[0].content["cancelled"] is True
    held = mapper.feed(line({"type": "result", "subtype": "error_during_execution", "is_error": True}))
    assert all(not o.type.startswith("terminal.") for o in held)
    receipt = ShutdownReceipt(stage="interrupted", elapsed_ms=1.0, pids=[1], survivors=[])
    assert mapper.finish_cancelled(receipt)[-1].type == "terminal.cancelled"


def test_an_execution_error_without_a_cancel_fails_at_the_exit() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    mapper.feed(line({"type": "result", "subtype": "error_during_execution", "is_error": True}))
    outs = mapper.finish_exited(1, None, "")
    assert outs[-1].type == "terminal.failed" and outs[-1].content["error"]["retryable"] is True


def test_text_without_partial_messages_comes_from_the_complete_block() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    message = {"id": "m1", "content": [{"type": "text", "text": "whole answer"}]}
    outs = mapper.feed(line({"type": "assistant", "message": message}))
    assert [o.content for o in outs] == [{"text": "whole answer"}]


def test_thoughts_are_buffered_to_the_message_end() -> None:
    mapper = ClaudeEventMapper(OPTIONS)

    def event(raw: dict[str, Any]) -> bytes:
        return line({"type": "stream_event", "event": raw, "parent_tool_use_id": None})

    outs = feed_all(
        mapper,
        [
            event({"type": "message_start", "message": {"id": "m1"}}),
            event({"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "one "}}),
            event({"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "two"}}),
            event({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "answer"}}),
        ],
    )
    assert [o.type for o in outs] == ["assistant"]
    end = mapper.feed(event({"type": "message_stop"}))
    assert [(o.type, o.content["text"]) for o in end] == [("assistant.thought", "one two")]


def test_a_sub_agents_stream_stays_out_of_the_text() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    raw = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "inner"}}
    assert mapper.feed(line({"type": "stream_event", "event": raw, "parent_tool_use_id": "t1"})) == []


def test_the_prompt_goes_on_stdin_and_retries_and_traffic_are_off() -> None:
    spec = launch_spec(("claude",), RunOptions(prompt="-p hi", cwd="/x", model="m", session_id="s1"))
    assert spec.stdin == b"-p hi" and "-p hi" not in spec.argv
    assert spec.argv[:6] == (
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
    )
    assert spec.argv[spec.argv.index("--resume") : spec.argv.index("--resume") + 2] == ("--resume", "s1")
    assert spec.argv[spec.argv.index("--permission-mode") + 1] == "acceptEdits"
    assert spec.env == {"CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def test_an_edit_is_announced_with_its_path_and_reported_with_its_patch() -> None:
    watch = ClaudeFileChangeWatch("/home/user/project")
    edit = {"type": "tool_use", "id": "t1", "name": "Edit",
            "input": {"file_path": "notes.txt", "old_string": "b", "new_string": "B"}}  # fmt: skip
    announced = watch.feed(line({"type": "assistant", "message": {"content": [edit]}}))
    assert [(a.call_id, a.path) for a in announced] == [("t1", "/home/user/project/notes.txt")]  # type: ignore[union-attr]
    patch = [{"oldStart": 1, "oldLines": 3, "newStart": 1, "newLines": 3, "lines": [" a", "-b", "+B", " c"]}]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    done = watch.feed(
        line(
            {"type": "user", "message": {"content": [result]}, "tool_use_result": {"structuredPatch": patch}}
        )
    )
    assert done[0].hunks == hunks_of(patch)  # type: ignore[union-attr]
    assert hunks_of(patch)[0].old == ("a\n", "b\n", "c\n")  # type: ignore[index]


def _assistant(blocks: list[dict[str, Any]], parent: str | None = None) -> bytes:
    message = {"id": "msg_1", "role": "assistant", "content": blocks}
    return line({"type": "assistant", "message": message, "parent_tool_use_id": parent})


def _tool_result(call_id: str, output: str, parent: str | None = None) -> bytes:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": output}
    return line({"type": "user", "message": {"content": [block]}, "parent_tool_use_id": parent})


def test_todo_write_becomes_the_whole_plan_after_its_call() -> None:
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Fix division by zero", "status": "in_progress", "activeForm": "Fixing"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
        {"content": "not a status", "status": "someday", "activeForm": "-"},
    ]
    use = {"type": "tool_use", "id": "toolu_todo", "name": "TodoWrite", "input": {"todos": todos}}
    outs = valid(feed_all(ClaudeEventMapper(OPTIONS), [_assistant([use])]))
    assert [o.type for o in outs] == ["tool.call", "plan"]
    assert outs[1].content == {
        "entries": [
            {"content": "Read the parser", "status": "completed"},
            {"content": "Fix division by zero", "status": "in_progress"},
            {"content": "Run the tests", "status": "pending"},
        ]
    }


def test_a_sub_agents_tool_calls_name_their_parent_and_its_text_stays_out() -> None:
    mapper = ClaudeEventMapper(OPTIONS)
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {"prompt": "look"}}
    child = {"type": "tool_use", "id": "toolu_child", "name": "Read", "input": {"file_path": "a.py"}}
    text = {"type": "text", "text": "the sub-agent's own words"}
    outs = valid(
        feed_all(
            mapper,
            [
                _assistant([task]),
                _assistant([text, child], parent="toolu_task"),
                _tool_result("toolu_child", "x = 1", parent="toolu_task"),
                _tool_result("toolu_task", "found it"),
            ],
        )
    )
    assert [(o.type, o.content["toolCallId"]) for o in outs] == [
        ("tool.call", "toolu_task"),
        ("tool.call", "toolu_child"),
        ("tool.completed", "toolu_child"),
        ("tool.completed", "toolu_task"),
    ]
    assert "parentToolCallId" not in outs[0].content
    assert outs[1].content["parentToolCallId"] == "toolu_task"
    assert outs[2].content["output"] == "x = 1"
    assert "sub-agent's own words" not in mapper.text
