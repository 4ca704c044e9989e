"""Prompts reach the model verbatim through the REAL pi and can never become pi flags or attachments.

The bridge writes the prompt to pi's stdin (never argv), so `-p`, `--model x`, `@file` and
newlines are plain text to pi. What the scripted model received is the proof. pi itself trims
leading and trailing whitespace (contract.md), so the expected text is `prompt.strip()`.
"""

from __future__ import annotations

import pytest
from pytest_lsp import LanguageClient

from bridge.scripted_model import TEXT_REPLY, ScriptedModelServer
from tests.support.env import requires_pi
from tests.support.lsp import messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

HOSTILE_PROMPTS = [
    "-p",
    "--",
    "--help",
    "--model text --provider other",
    "--mode rpc",
    "-nc --no-tools",
    "@README.md",
    "@/etc/passwd summarize this",
    "@",
    "first line\nsecond line\n\tthird, indented\n",
    "--\n@README.md\n-p",
    "  leading and trailing whitespace  ",
    'quote " backslash \\ dollar $HOME backtick `id` semicolon ; pipe |',
    "separators \u2028 \u2029 \u0085 and emoji \U0001f600 and NUL-free control \x07",
]


@pytest.mark.parametrize("prompt", HOSTILE_PROMPTS, ids=range(len(HOSTILE_PROMPTS)))
async def test_prompt_reaches_the_model_verbatim(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer, prompt: str
) -> None:
    result = await request(real_bridge, "pi/run", {"prompt": prompt, "provider": "fake", "model": "echo"})
    assert result["status"] == "completed", result
    assert scripted_model.last_user_text("echo") == prompt.strip()
    assert result["text"] == "ECHO:" + prompt.strip()
    assert_stream_invariants(messages_of(real_bridge).by_run[result["runId"]])


@pytest.mark.slow
async def test_10_mb_prompt_reaches_the_model_verbatim(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer
) -> None:
    line = "-p @README.md --model x \u2028 line of a very long prompt \U0001f600\n"
    prompt = "--" + line * (10 * 1024 * 1024 // len(line.encode()))
    assert len(prompt.encode()) > 10 * 1000 * 1000
    result = await request(real_bridge, "pi/run", {"prompt": prompt, "provider": "fake", "model": "text"})
    assert result["status"] == "completed", {k: v for k, v in result.items() if k != "text"}
    received = scripted_model.last_user_text("text")
    assert received is not None and len(received) == len(prompt.strip())
    assert received == prompt.strip()


@pytest.mark.slow
async def test_20_mb_prompt_completes_through_the_real_pi(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer
) -> None:
    """pi repeats the prompt in its message_start/message_end/agent_end lines: each is > 16 MB here."""
    prompt = "twenty megabytes of prompt " * (20 * 1024 * 1024 // 27)
    result = await request(real_bridge, "pi/run", {"prompt": prompt, "provider": "fake", "model": "text"})
    assert scripted_model.last_user_text("text") == prompt.strip()
    assert result["status"] == "completed", result.get("error", {}).get("message")
    assert result["text"] == TEXT_REPLY
