"""The first run of a new user, over LSP on real pi: no provider, no key. The prompt fails once,
with kind `auth` (a missing key is not `busy`, and retrying cannot help), and says how to fix it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, initialize, messages_of, request

pytestmark = [requires_pi, pytest.mark.realpi]

# The provider keys pi reads from the environment: none may reach this bridge's pi.
_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY")


@pytest_lsp.fixture(config=bridge_config({key: "" for key in _KEYS}))
async def keyless_bridge(lsp_client: LanguageClient, tmp_path: Path) -> AsyncIterator[LanguageClient]:
    agent_dir = tmp_path / "empty-pi-agent"  # no models.json, no auth.json: a new user's pi
    agent_dir.mkdir()
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(agent_dir)}, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_prompt_without_a_key_fails_once_with_kind_auth(
    keyless_bridge: LanguageClient, tmp_path: Path
) -> None:
    with anyio.fail_after(60):
        result = await request(keyless_bridge, "pi/run", {"prompt": "hello", "cwd": str(tmp_path)})
    messages = messages_of(keyless_bridge).by_run[result["runId"]]
    error = result["error"]
    assert error["kind"] == "auth", error
    assert error["retryable"] is False
    assert "api key" in error["message"].lower()
    failed = [m for m in messages if m["type"] == "terminal.failed"]
    assert len(failed) == 1, "one failure, not one per retry"
    assert failed[0]["content"]["error"]["kind"] == "auth"
    assert result["attempts"] == 1
