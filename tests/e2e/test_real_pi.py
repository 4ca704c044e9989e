"""End to end against the REAL pi and the project's scripted model, through pytest-lsp."""

from __future__ import annotations

import time

import pytest
from pytest_lsp import LanguageClient

from bridge.scripted_model import TEXT_REPLY, ScriptedModelServer
from tests.support.env import requires_pi
from tests.support.lsp import messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


async def run(client: LanguageClient, **params: object) -> tuple[dict[str, object], list[dict[str, object]]]:
    result = await request(client, "pi/run", {"prompt": "Say hello", "provider": "fake", **params})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def test_text_deltas_concatenate_to_the_final_text(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="text")
    assert result["status"] == "completed"
    assert result["text"] == TEXT_REPLY
    deltas = [m for m in messages if m["type"] == "assistant"]
    assert len(deltas) > 1, "text must stream as several deltas"
    assert "".join(m["content"]["text"] for m in deltas) == TEXT_REPLY
    assert result["usage"]["totalTokens"] > 0
    assert messages[0]["type"] == "session.started"
    assert result["sessionId"] == messages[0]["content"]["sessionId"]


async def test_thinking_is_one_complete_thought_before_the_end(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="thinking")
    thoughts = [m for m in messages if m["type"] == "assistant.thought"]
    assert len(thoughts) == 1 and len(thoughts[0]["content"]["text"]) > 10
    assert result["status"] == "completed"


async def test_live_thoughts_stream_as_fragments(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="thinking", liveThoughts=True)
    thoughts = [m for m in messages if m["type"] == "assistant.thought"]
    assert len(thoughts) > 1 and all(m["content"].get("live") for m in thoughts)


async def test_tool_call_is_opened_and_closed(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="tool")
    kinds = [m["type"] for m in messages]
    assert kinds.index("tool.call") < kinds.index("tool.completed")
    completed = next(m for m in messages if m["type"] == "tool.completed")
    assert completed["content"]["output"].strip() == "hi"
    assert result["status"] == "completed"


async def test_failed_tool_is_tool_failed(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="toolfail")
    assert any(m["type"] == "tool.failed" for m in messages)
    assert result["status"] == "completed"


async def test_model_error_fails_fast_and_retryable(real_bridge: LanguageClient) -> None:
    started = time.monotonic()
    result, messages = await run(real_bridge, model="err500")
    elapsed = time.monotonic() - started
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "server" and result["error"]["retryable"] is True
    assert result["attempts"] == 1
    # pi's own retries would take ~25 s; the bridge ends the attempt at the first failure.
    assert elapsed < 10, f"took {elapsed:.1f} s"


async def test_auth_error_is_not_retryable(real_bridge: LanguageClient) -> None:
    result, _ = await run(real_bridge, model="err401", retry={"maxAttempts": 3, "initialDelayMs": 10})
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "auth" and result["attempts"] == 1


async def test_unicode_survives(real_bridge: LanguageClient) -> None:
    result, messages = await run(real_bridge, model="unicode")
    assert "\u2028" in result["text"] and "\u2029" in result["text"]


async def test_prompt_reaches_the_model_verbatim(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer
) -> None:
    for prompt in ["--version", "@README.md please", "-p\nsecond line\n\tthird"]:
        result, _ = await run(real_bridge, model="echo", prompt=prompt)
        assert scripted_model.last_user_text("echo") == prompt
        assert result["text"] == "ECHO:" + prompt


async def test_length_stop_reason(real_bridge: LanguageClient) -> None:
    result, _ = await run(real_bridge, model="length")
    assert result["stopReason"] == "length"
