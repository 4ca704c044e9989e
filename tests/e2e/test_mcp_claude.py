"""A conversation's MCP servers reach a live Claude Code through `--mcp-config`: the real Claude
Code, the scripted model's Anthropic API and the real stdio MCP server of tests/fixtures.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import pytest_lsp
from acp import schema
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import trailing_tool_result
from tests.e2e.test_agents_acp import _claude_acp, _workdir
from tests.e2e.test_claude_live import CONFIG
from tests.e2e.test_mcp import SECRET, TOOL, call_params, cmdline, stdio_server
from tests.fixtures.mcp_server import TOKEN, secret_digest
from tests.support.acp import choose, prompt, text_of
from tests.support.env import WAIT, requires_claude
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import initialize, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_claude, pytest.mark.realpi]


@pytest_lsp.fixture(config=CONFIG)
async def claude_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge whose own agent is Claude Code, against the scripted model."""
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    env = {
        "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "PI_BRIDGE_STATE_DIR": str(tmp_path / "state"),
    }
    await initialize(lsp_client, {"env": env, "silenceTimeoutMs": 30000, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_claude_code_calls_the_mcp_tool_and_its_result_reaches_the_model_and_the_stream(
    claude_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = await request(claude_bridge, "pi/run", {**call_params(work, "over-claude", [stdio_server()]),
                                                     "provider": None})  # fmt: skip
    messages = messages_of(claude_bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    expected = f"{TOKEN} over-claude secret={secret_digest(SECRET)}"
    told = [m["content"] for m in messages if m["type"] in ("notice", "error")]
    assert result["status"] == "completed", (result.get("error"), told)
    assert expected in result["text"], result["text"]
    [call] = [m["content"] for m in messages if m["type"] == "tool.call"]
    assert call["name"] == TOOL and call["arguments"] == {"text": "over-claude"}
    [done] = [m["content"] for m in messages if m["type"] == "tool.completed"]
    assert expected in done["output"]
    bodies = [r["body"] for r in scripted_model.requests if r["model"] == "calltool"]
    assert any(expected in (trailing_tool_result(body) or "") for body in bodies), "the model got the result"
    runs = await request(claude_bridge, "pi/runs", {})
    [live] = [entry for entry in runs["live"] if entry["sessionId"] == result["sessionId"]]
    argv = cmdline(psutil.Process(live["pid"]))
    assert "--mcp-config" in argv and SECRET not in argv
    assert SECRET not in json.dumps(messages)


async def test_claude_code_tells_of_an_mcp_server_that_failed_and_the_run_ends(
    claude_bridge: LanguageClient, tmp_path: Path
) -> None:
    broken = {"name": "broken", "command": str(tmp_path / "no-such-mcp-server"), "args": [], "env": []}
    params = {**call_params(tmp_path, "still works", [broken, stdio_server()]), "provider": None}
    result = await request(claude_bridge, "pi/run", params)
    messages = messages_of(claude_bridge).by_run[result["runId"]]
    notices = [m["content"]["text"] for m in messages if m["type"] == "notice"]
    assert result["status"] == "completed" and TOKEN in result["text"], (result, notices)
    assert any("MCP server broken: failed" in n for n in notices), notices


async def test_acp_claude_code_asks_before_an_mcp_tool_call_and_a_reject_reaches_the_model(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with _claude_acp(pi_agent_dir, scripted_model, tmp_path, "calltool") as (conn, recorder, _):
        recorder.answer = choose("reject_once")
        servers = [schema.McpServerStdio.model_validate(stdio_server())]
        work = _workdir(tmp_path)
        session = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=servers), WAIT)
        answer = await prompt(conn, session.session_id, f"{TOOL} refused")
        assert answer.stop_reason == "end_turn"
        [asked] = recorder.permission_requests
        assert TOOL in (asked.tool_call.title or ""), "Claude Code's MCP tool goes through approvals"
        said = text_of(recorder.of(session.session_id))
        assert TOKEN not in said, "the tool did not run"
        recorder.answer = choose("allow_once")
        again = await prompt(conn, session.session_id, f"{TOOL} allowed")
        assert again.stop_reason == "end_turn"
        assert f"{TOKEN} allowed secret={secret_digest(SECRET)}" in text_of(recorder.of(session.session_id))
