"""End to end through pytest-lsp against the fake pi: faults real pi cannot produce on demand."""

from __future__ import annotations

import time

from pytest_lsp import LanguageClient

from tests.fakes.fake_pi import TEXT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import messages_of, request
from tests.support.streams import assert_stream_invariants


async def run(client: LanguageClient, **params: object) -> tuple[dict[str, object], list[dict[str, object]]]:
    result = await request(client, "pi/run", {"prompt": "hi", **params})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def test_text_streams_and_completes(fake_bridge: LanguageClient) -> None:
    result, messages = await run(fake_bridge, model="text", runId="t1")
    assert result["status"] == "completed"
    assert result["text"] == TEXT
    assert messages[0]["type"] == "session.started"
    assert messages[-1]["type"] == "terminal.completed"


async def test_garbage_lines_are_skipped_and_never_kill_the_stream(fake_bridge: LanguageClient) -> None:
    # A completed run does not report the lines it skipped (only a failed one carries
    # invalidOutputLines); what is checked here is that they cost nothing but themselves.
    result, messages = await run(fake_bridge, model="garbage")
    assert result["status"] == "completed"
    assert result["text"] == "before after"


async def test_exit_without_terminal_is_a_failure_with_partial_text(fake_bridge: LanguageClient) -> None:
    result, messages = await run(fake_bridge, model="noterminal")
    assert result["status"] == "failed"
    assert result["text"] == "partial answer"
    assert result["error"]["kind"] == "process"
    assert "without finishing" in result["error"]["message"]


async def test_crash_mid_tool_closes_the_tool_and_keeps_stderr(fake_bridge: LanguageClient) -> None:
    result, messages = await run(fake_bridge, model="crash_tool")
    assert result["status"] == "failed"
    assert result["error"]["signal"] == "SIGKILL"
    assert "segmentation fault" in result["error"]["stderr"]
    failed = [m for m in messages if m["type"] == "tool.failed"]
    assert failed and failed[0]["content"]["toolCallId"] == "call_1"


async def test_a_usage_error_of_pi_is_a_non_retryable_failure(fake_bridge: LanguageClient) -> None:
    # A missing pi executable is test_lifecycle's test_missing_pi_is_a_terminal_failed_message_not_an_exception.
    result, messages = await run(fake_bridge, model="usage_error")
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "usage"
    assert result["error"]["retryable"] is False


async def test_model_error_with_pi_auto_retry_ends_the_attempt_at_once(fake_bridge: LanguageClient) -> None:
    # The fake announces pi's auto-retry and then waits 60 s: "at once" is well before that
    # (a sanity bound, not a speed measurement; bench/ measures speed).
    started = time.monotonic()
    result, messages = await run(fake_bridge, model="model_error_retry")
    assert time.monotonic() - started < 10, "the attempt ended when the error arrived, not when pi gave up"
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "server"
    assert result["error"]["retryable"] is True


async def test_prompts_reach_pi_verbatim_through_stdin(fake_bridge: LanguageClient) -> None:
    for prompt in ["--help", "-p", "@/etc/passwd", "line one\nline two\n  indented", "--mode rpc"]:
        result = await request(fake_bridge, "pi/run", {"prompt": prompt, "model": "echo"})
        assert result["text"] == prompt
    result = await request(fake_bridge, "pi/run", {"prompt": "--mode rpc @x", "model": "argv"})
    assert "@x" not in result["text"] and "rpc" not in result["text"].replace('"--mode", "json"', "")


async def test_unicode_separators_survive_framing(fake_bridge: LanguageClient) -> None:
    result, messages = await run(fake_bridge, model="unicode")
    assert result["text"] == 'line\u2028sep\u2029para\u0085next 😀 漢字 e\u0301 "q" \\b'


async def test_an_oversized_line_is_skipped_and_the_stream_goes_on(fake_bridge: LanguageClient) -> None:
    result, messages = await run(fake_bridge, model="huge_line")
    assert result["status"] == "completed"
    assert result["text"] == "small end"


async def test_processes_left_behind_by_a_finished_run_are_killed(fake_bridge: LanguageClient) -> None:
    result, _ = await run(fake_bridge, model="leave_background")
    assert result["status"] == "completed"
    await assert_no_run_processes(client=fake_bridge)
