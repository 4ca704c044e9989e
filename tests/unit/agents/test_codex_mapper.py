"""Codex's mapper over the lines `codex exec --json` printed (0.171.0, captured against the scripted
model), and the live client's rewrite of `codex app-server` notifications into those lines."""

from __future__ import annotations

import json
from typing import Any, cast

import orjson

from bridge.agents.codex.command import launch_spec
from bridge.agents.codex.live import CodexLive, CodexLiveMode
from bridge.agents.codex.mapper import CodexEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.contract import SandboxSettings
from bridge.process.spawn import ChildProcess

THREAD = "01a24a9c-a04a-7011-a7a9-695283947461"
EXEC_TOOL_RUN = [
    {"type": "thread.started", "thread_id": THREAD},
    {"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": "Model metadata for `tool` not found."}},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "Let me run that command."}},
    {
        "type": "item.started",
        "item": {"id": "item_2", "type": "command_execution", "command": "/bin/bash -lc 'echo hi'",
                 "aggregated_output": "", "exit_code": None, "status": "in_progress"},
    },
    {
        "type": "item.completed",
        "item": {"id": "item_2", "type": "command_execution", "command": "/bin/bash -lc 'echo hi'",
                 "aggregated_output": "hi\n", "exit_code": 0, "status": "completed"},
    },
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "The command printed: hi. Done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 10257, "cached_input_tokens": 0, "output_tokens": 26}},
]  # fmt: skip


def feed(mapper: CodexEventMapper, events: list[dict[str, Any]]) -> list[Out]:
    out: list[Out] = []
    for event in events:
        out += mapper.feed(json.dumps(event).encode())
    return out


def test_an_exec_run_maps_to_session_text_tool_and_completion() -> None:
    mapper = CodexEventMapper(RunOptions(prompt="go", cwd="/w"))
    out = feed(mapper, EXEC_TOOL_RUN)
    assert [m.type for m in out] == [
        "session.started", "notice", "assistant", "tool.call", "tool.completed", "assistant", "terminal.completed",
    ]  # fmt: skip
    assert out[0].content["sessionId"] == THREAD
    assert out[3].content["arguments"]["command"] == "/bin/bash -lc 'echo hi'"
    assert out[4].content == {"toolCallId": "item_2", "name": "exec_command", "output": "hi\n"}
    assert mapper.text == "Let me run that command.\n\nThe command printed: hi. Done."
    assert out[-1].content["usage"]["input"] == 10257 and out[-1].content["usage"]["output"] == 26


def test_a_failed_turn_fails_the_attempt_and_an_exit_without_a_turn_end_too() -> None:
    mapper = CodexEventMapper(RunOptions(prompt="go", cwd="/w"))
    out = feed(
        mapper,
        [
            {"type": "thread.started", "thread_id": THREAD},
            {"type": "turn.failed", "error": {"message": "HTTP 500"}},
        ],
    )
    assert out[-1].type == "terminal.failed" and out[-1].content["error"]["message"] == "HTTP 500"
    assert out[-1].content["error"]["retryable"] is True
    exited = CodexEventMapper(RunOptions(prompt="go", cwd="/w"))
    feed(exited, EXEC_TOOL_RUN[:5])  # killed with the command open
    closing = exited.finish_exited(None, "SIGKILL", "")
    assert [m.type for m in closing] == ["tool.failed", "terminal.failed"]
    assert "Codex was killed by SIGKILL" in closing[-1].content["error"]["message"]


def test_exec_reads_the_prompt_from_stdin_and_maps_the_sandbox() -> None:
    options = RunOptions(prompt="-rf /", cwd="/w", model="echo", session_id=THREAD,
                         sandbox=SandboxSettings(mode="workspace-write"))  # fmt: skip
    spec = launch_spec(("codex",), options, resume=True)
    assert spec.argv[:4] == ("codex", "exec", "resume", THREAD)
    assert spec.argv[-1] == "-" and spec.stdin == b"-rf /", "the prompt never in argv"
    assert 'sandbox_mode="workspace-write"' in spec.argv and spec.argv[-3:-1] == ("-m", "echo")


class _Child:
    argv = ("codex", "app-server")
    handle = None


def test_the_live_client_rewrites_app_server_notifications_into_exec_lines() -> None:
    live = CodexLive(cast(ChildProcess, _Child()))
    seen: list[bytes] = []
    live.listener = seen.extend
    notifications = [
        {"method": "item/agentMessage/delta", "params": {"itemId": "m", "delta": "Let "}},
        {"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m", "text": "Let "}}},
        {"method": "item/started", "params": {"item": {"type": "commandExecution", "id": "c", "command": "ls",
                                                         "status": "inProgress"}}},
        {"method": "item/completed", "params": {"item": {"type": "commandExecution", "id": "c", "command": "ls",
                                                           "aggregatedOutput": "a\n", "exitCode": 0, "status": "completed"}}},
        {"method": "thread/tokenUsage/updated", "params": {"tokenUsage": {"last": {"inputTokens": 7, "outputTokens": 2}}}},
        {"method": "turn/completed", "params": {"turn": {"id": "t", "status": "completed"}}},
    ]  # fmt: skip
    live._dispatch([orjson.dumps(n) for n in notifications])
    lines = [json.loads(line) for line in seen]
    assert [line["type"] for line in lines] == [
        "message.delta",
        "item.started",
        "item.completed",
        "turn.completed",
    ]
    assert lines[2]["item"]["aggregated_output"] == "a\n" and lines[2]["item"]["type"] == "command_execution"
    assert lines[3]["usage"]["input_tokens"] == 7
    assert live.run_end_line == seen[-1]
    assert CodexLiveMode().event_kind(seen[-1]) == "settled"
    assert CodexLiveMode().event_kind(seen[0]) is None
    mapper = CodexEventMapper(RunOptions(prompt="go", cwd="/w"))
    out = [m for line in [b'{"type":"session","id":"t1","cwd":"/w"}', *seen] for m in mapper.feed(line)]
    assert [m.type for m in out] == [
        "session.started",
        "assistant",
        "tool.call",
        "tool.completed",
        "terminal.completed",
    ]
