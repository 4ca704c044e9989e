"""Claude Code's live mode, the pure parts: flags, permission questions and answers, the turn's end,
session files, and the client's reading of control lines (no process)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import orjson

from bridge.agents.claude.live import ClaudeLive, ClaudeLiveMode, event_kind, live_flags
from bridge.agents.claude.tool_checks import WEB_HOOK_ID, answer_line, hook_answer_line, tool_check
from bridge.agents.values import RunOptions, ToolVerdict
from bridge.process.spawn import ChildProcess


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write_now(self, data: bytes) -> None:
        self.lines.extend(orjson.loads(line) for line in data.splitlines() if line)


def _client(argv: tuple[str, ...] = ("claude", "--session-id", "s1")) -> tuple[ClaudeLive, _Stdin]:
    stdin = _Stdin()
    child = SimpleNamespace(stdin=stdin, argv=argv, handle=None)
    return ClaudeLive(cast(ChildProcess, child)), stdin


def test_flags_ask_the_bridge_unless_claude_codes_own_mode_is_chosen() -> None:
    options = RunOptions(prompt="", cwd="/w", model="sonnet", tools=("Bash", "Write"))
    flags = live_flags(options, "acceptEdits", ("Bash",), ("--session-id", "s1"))
    assert flags[:7] == [
        "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
        "--include-partial-messages",
    ]  # fmt: skip
    joined = " ".join(flags)
    assert "--permission-mode default --permission-prompt-tool stdio" in joined
    assert "--model sonnet --tools Bash,Write --allowedTools Bash --session-id s1" in joined
    plan = live_flags(options, "plan", (), ("--resume", "s1"))
    assert "--permission-prompt-tool" not in plan and plan[-2:] == ["--resume", "s1"]


def test_a_stored_session_is_resumed_and_a_new_one_named_by_the_bridge() -> None:
    mode = ClaudeLiveMode("acceptEdits", ())
    resumed = mode.launch_spec(("claude",), RunOptions(prompt="", cwd="/w", session_id="abc"))
    assert resumed.argv[-2:] == ("--resume", "abc")
    named = mode.launch_spec(("claude",), RunOptions(prompt="", cwd="/w"), new_session_id="n1")
    assert named.argv[-2:] == ("--session-id", "n1")
    fresh = mode.launch_spec(("claude",), RunOptions(prompt="", cwd="/w"))
    assert fresh.argv[-2] == "--session-id" and len(fresh.argv[-1]) == 36


def test_a_write_question_is_an_edit_check_with_its_change() -> None:
    request = {
        "subtype": "can_use_tool",
        "tool_name": "Write",
        "input": {"file_path": "/w/a.txt", "content": "x\n"},
        "tool_use_id": "toolu_1",
    }
    check = tool_check(request)
    assert check is not None
    assert (check.tool_call_id, check.tool, check.kind, check.path) == (
        "toolu_1",
        "Write",
        "edit",
        "/w/a.txt",
    )
    assert check.change is not None and check.change.content == "x\n"
    edit = tool_check(
        {"tool_name": "Edit", "input": {"file_path": "/w/a", "old_string": "a", "new_string": "b"}}
    )
    assert edit is not None and edit.change is not None and edit.change.replacements == (("a", "b"),)
    bash = tool_check({"tool_name": "Bash", "input": {"command": "touch x"}})
    assert bash is not None and (bash.kind, bash.command) == ("execute", "touch x")
    assert tool_check({"input": {}}) is None


def test_the_web_tools_are_not_read_only_and_their_hook_asks() -> None:
    """WebFetch and WebSearch send data out: the gate asks (or refuses in plan), never allows
    them as reads; the hook sends them to the gate in Claude Code's own plan mode too."""
    for tool, arguments in (("WebFetch", {"url": "http://x", "prompt": "p"}), ("WebSearch", {"query": "q"})):
        check = tool_check({"tool_name": tool, "input": arguments})
        assert check is not None and check.kind == "other", tool
    line = hook_answer_line("h1", {"subtype": "hook_callback", "callback_id": WEB_HOOK_ID, "input": {}})
    assert line is not None
    response = orjson.loads(line)["response"]
    assert response["request_id"] == "h1"
    assert response["response"]["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert hook_answer_line("h2", {"subtype": "hook_callback", "callback_id": "someone-else"}) is None


def test_the_answer_allows_with_the_input_or_denies_with_the_reason() -> None:
    allowed = orjson.loads(answer_line("r1", ToolVerdict(allow=True), tool_input={"command": "ls"}))
    assert allowed == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": "r1",
            "response": {"behavior": "allow", "updatedInput": {"command": "ls"}},
        },
    }
    denied = orjson.loads(answer_line("r2", ToolVerdict(allow=False, reason="no"), tool_input={}))
    assert denied["response"]["response"] == {"behavior": "deny", "message": "no"}


def test_the_result_line_settles_the_turn_and_nothing_else_does() -> None:
    assert event_kind(b'{"type":"result","subtype":"success","is_error":false}') == "settled"
    assert event_kind(b'{"type":"assistant","message":{}}') is None
    assert event_kind(b'{"type":"user","message":{"content":"result"}}') is None


def test_the_client_keeps_the_result_line_and_drops_answers_and_command_echoes() -> None:
    client, _ = _client()
    seen: list[bytes] = []
    client.listener = seen.extend
    pending = client.send_now("initialize", {})
    answer = {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": pending.command_id},
    }
    result = b'{"type":"result","subtype":"success","is_error":false,"result":"hi"}'
    client._dispatch([
        orjson.dumps(answer),
        b'{"type":"user","message":{"content":"Set model"},"isReplay":true}',
        b'{"type":"assistant","message":{}}',
        result,
    ])  # fmt: skip
    assert pending.answered.is_set()
    assert seen == [b'{"type":"assistant","message":{}}', result]
    assert client.run_end_line == result


async def test_an_interrupt_is_done_when_the_turn_ends_not_when_it_is_acknowledged() -> None:
    client, stdin = _client()
    pending = client.send_abort_now()
    assert stdin.lines[-1]["request"] == {"subtype": "interrupt"}
    ack = {"type": "control_response", "response": {"subtype": "success", "request_id": pending.command_id}}
    client._dispatch([orjson.dumps(ack)])
    assert not pending.answered.is_set()
    client._dispatch([b'{"type":"result","subtype":"error_during_execution","is_error":true}'])
    with anyio.fail_after(1):
        assert await client.answer(pending, 1) == {}


def test_a_question_with_no_run_listening_is_denied_at_once() -> None:
    client, stdin = _client()
    question = {
        "type": "control_request",
        "request_id": "q1",
        "request": {"subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "/a"}},
    }
    client._dispatch([orjson.dumps(question)])
    answers = [line for line in stdin.lines if line["type"] == "control_response"]
    assert len(answers) == 1 and answers[0]["response"]["response"]["behavior"] == "deny"


def test_a_retried_prompt_cuts_the_session_back_to_the_entries_stamped_before_it(tmp_path: Path) -> None:
    """Claude Code writes entries lazily: the cut goes by their stamps, never by a size taken
    when the end of the turn before may not be on disk yet."""
    mode = ClaudeLiveMode("acceptEdits", ())
    before = b'{"type":"user","timestamp":"2026-12-02T10:00:00.000Z"}\n{"type":"last-prompt"}\n'
    failed = (
        b'{"type":"queue-operation","timestamp":"2026-12-02T10:00:05.000Z"}\n'
        b'{"type":"attachment","timestamp":"2026-12-02T10:00:04.999Z"}\n'
        b'{"type":"assistant","timestamp":"2026-12-02T10:00:05.100Z"}\n'
    )
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(before + failed)
    mark = 1_796_205_605_000  # 2026-12-02T10:00:05.000Z
    mode.cut_session_back(str(kept), mark)
    assert kept.read_bytes() == before
    started = tmp_path / "started.jsonl"
    started.write_bytes(failed)
    mode.cut_session_back(str(started), mark)
    assert not started.exists(), "a session that held only the failed prompt is started again"
    also = tmp_path / "also.jsonl"
    also.write_bytes(before)
    mode.cut_session_back(str(also), None)
    assert not also.exists()
    mode.cut_session_back(str(tmp_path / "missing.jsonl"), mark)  # nothing to cut: no error
