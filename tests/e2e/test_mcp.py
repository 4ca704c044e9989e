"""A conversation's MCP servers reach real pi: a real stdio MCP server (tests/fixtures/mcp_server.py,
on the official `mcp` package) whose tool the scripted model calls by name, over LSP and ACP.

The `calltool` scenario calls the tool its prompt's first word names with the rest as `text`; the
fixture answers its token, that text, and a digest of its MCP_FIXTURE_SECRET, so the tests see the
call, its result reaching the model and the stream, and the server's env reaching it, while the
secret itself must appear nowhere the bridge writes.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_lsp
from acp import RequestError, schema
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import trailing_tool_result
from tests.fixtures.mcp_server import TOKEN, secret_digest
from tests.support.acp import acp_bridge, new_session, prompt, text_of
from tests.support.env import ROOT, WAIT, requires_pi
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import answer_or_error, bridge_config, initialize, messages_of, request, start_request
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

FIXTURE = ROOT / "tests" / "fixtures" / "mcp_server.py"
TOOL = "mcp__fixture__echo_token"
SECRET = "mcp-SECRET-value-5d1e9a7c3b"


def stdio_server(
    name: str = "fixture", secret: str = SECRET, command: str = sys.executable
) -> dict[str, Any]:
    """The fixture as an ACP-shaped stdio entry."""
    return {
        "name": name,
        "command": command,
        "args": [str(FIXTURE)],
        "env": [{"name": "MCP_FIXTURE_SECRET", "value": secret}],
    }


def call_params(tmp_path: Path, text: str, servers: list[dict[str, Any]], tool: str = TOOL) -> dict[str, Any]:
    return {
        "prompt": f"{tool} {text}",
        "provider": "fake",
        "model": "calltool",
        "cwd": str(tmp_path),
        "mcpServers": servers,
    }


@pytest_lsp.fixture(config=bridge_config())
async def bridge(
    lsp_client: LanguageClient, pi_agent_dir: Path, tmp_path: Path
) -> AsyncIterator[LanguageClient]:
    env = {"PI_CODING_AGENT_DIR": str(pi_agent_dir), "PI_BRIDGE_STATE_DIR": str(tmp_path / "state")}
    await initialize(lsp_client, {"env": env, "silenceTimeoutMs": 60000, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def mcp_servers_under(pid: int) -> list[int]:
    return [p.pid for p in psutil.Process(pid).children(recursive=True) if "mcp_server.py" in cmdline(p)]


def live_pid(runs: dict[str, Any], session_id: str) -> int:
    [pid] = [entry["pid"] for entry in runs["live"] if entry["sessionId"] == session_id]
    return int(pid)


async def test_lsp_a_run_s_mcp_tool_is_called_and_its_result_reaches_the_model_and_the_stream(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    text = f"over-lsp-{os.urandom(3).hex()}"
    result = await request(bridge, "pi/run", call_params(tmp_path, text, [stdio_server()]))
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    expected = f"{TOKEN} {text} secret={secret_digest(SECRET)}"
    assert result["status"] == "completed" and expected in result["text"], result
    [call] = [m["content"] for m in messages if m["type"] == "tool.call"]
    assert call["name"] == TOOL and call["arguments"] == {"text": text}
    [done] = [m["content"] for m in messages if m["type"] == "tool.completed"]
    assert done["name"] == TOOL and expected in done["output"]
    bodies = [r["body"] for r in scripted_model.requests if r["model"] == "calltool"]
    assert any(expected in (trailing_tool_result(body) or "") for body in bodies), "the model got the result"
    assert any(TOOL in json.dumps(body.get("tools")) for body in bodies), "the tool was offered by name"


async def test_lsp_another_mcp_set_never_reuses_the_process_of_a_conversation(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    first = await request(bridge, "pi/run", call_params(tmp_path, "one", [stdio_server()]))
    sid = first["sessionId"]
    pid = live_pid(await request(bridge, "pi/runs", {}), sid)
    [server] = mcp_servers_under(pid)
    same = await request(
        bridge, "pi/run", {**call_params(tmp_path, "two", [stdio_server()]), "sessionId": sid}
    )
    assert same["status"] == "completed" and live_pid(await request(bridge, "pi/runs", {}), sid) == pid
    assert mcp_servers_under(pid) == [server], "the MCP server outlives a run: pi's, not the run's"
    other = [stdio_server("other", secret="another-secret-value")]
    moved = await request(bridge, "pi/run", {**call_params(tmp_path, "three", other, "mcp__other__echo_token"),
                                             "sessionId": sid})  # fmt: skip
    assert moved["status"] == "completed" and secret_digest("another-secret-value") in moved["text"], moved
    assert live_pid(await request(bridge, "pi/runs", {}), sid) != pid, "a new pi for the new set"
    gone = await request(bridge, "pi/run", {**call_params(tmp_path, "four", other), "sessionId": sid})
    assert "No tool named mcp__fixture__echo_token is offered" in gone["text"], "the old set is gone"


async def test_lsp_an_mcp_server_whose_command_does_not_exist_is_told_and_the_run_ends(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    broken = {"name": "broken", "command": str(tmp_path / "no-such-mcp-server"), "args": [], "env": []}
    params = {**call_params(tmp_path, "x", [broken, stdio_server()]), "prompt": f"{TOOL} still works"}
    result = await asyncio.wait_for(request(bridge, "pi/run", params), WAIT)
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    assert result["status"] == "completed" and TOKEN in result["text"], "the other server still serves"
    notices = [m["content"]["text"] for m in messages if m["type"] == "notice"]
    assert any("broken" in n and "ENOENT" in n for n in notices), notices


async def test_lsp_an_mcp_server_that_never_answers_delays_the_first_prompt_boundedly(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    mute = {"name": "mute", "command": "sleep", "args": ["300"], "env": []}
    params = {**call_params(tmp_path, "x", [mute]), "model": "text", "prompt": "Say hello"}
    started = time.monotonic()
    result = await asyncio.wait_for(request(bridge, "pi/run", params), WAIT)
    assert result["status"] == "completed" and result["text"], result.get("error")
    assert time.monotonic() - started < 25, "pi's own bound on waiting for a server, not a hang"


async def test_lsp_a_bad_mcp_server_entry_is_invalid_params_naming_its_field(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    cases = {
        "mcpServers.0.stdio.name": [{**stdio_server(), "name": "has space"}],
        "mcpServers.0": [{"type": "sse", "name": "s", "url": "http://127.0.0.1:9/sse", "headers": []}],
        "mcpServers.0.stdio.env": [{**stdio_server(), "env": {"A": "b"}}],
        "mcpServers": [stdio_server("same"), stdio_server("same")],
    }
    for field, servers in cases.items():
        _, error = await answer_or_error(
            start_request(bridge, "pi/run", call_params(tmp_path, "x", servers))[1]
        )
        assert error is not None and error.code == -32602 and field in error.message, (field, error)
        assert SECRET not in f"{error.message} {error.data}", "a value is never echoed"
    fine = await request(bridge, "pi/run", call_params(tmp_path, "after", [stdio_server()]))
    assert fine["status"] == "completed"


def test_an_mcp_server_s_secret_reaches_it_but_no_log_frame_argv_or_environment(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    log_file, stderr_file, state = tmp_path / "bridge.log", tmp_path / "bridge.stderr", tmp_path / "state"
    bridge = RawBridge(
        ["--log-level", "DEBUG"],
        {"PI_BRIDGE_LOG_LEVEL": "DEBUG", "PI_BRIDGE_STATE_DIR": str(state)},
        log_file=log_file,
        stderr_file=stderr_file,
    )
    try:
        init = bridge.initialize({"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)},
                                  "mcpServers": [stdio_server()]})  # fmt: skip
        ours = init["result"]["capabilities"]["experimental"]["piBridge"]
        assert ours["mcp"] == {"stdio": True, "http": True, "sse": False}
        params = {k: v for k, v in call_params(tmp_path, "quiet", []).items() if k != "mcpServers"}
        answer = bridge.call("pi/run", params)["result"]
        assert answer["status"] == "completed" and secret_digest(SECRET) in answer["text"], "the default set"
        [config] = list((state / "mcp").glob("*/*.json"))
        assert (
            stat.S_IMODE(config.stat().st_mode) == 0o600
            and stat.S_IMODE(config.parent.stat().st_mode) == 0o700
        )
        live = bridge.call("pi/runs", {})["result"]["live"]
        pi = psutil.Process(live[0]["pid"])
        tree = [pi, *pi.children(recursive=True)]
        print(
            "TREE",
            [(p.pid, cmdline(p)) for p in tree],
            [
                (p.pid, p.ppid(), cmdline(p), [(q.pid, cmdline(q)[:40]) for q in p.parents()])
                for p in psutil.process_iter()
                if "mcp_server.py" in cmdline(p)
            ],
            bridge.call("pi/runs", {})["result"],
        )
        assert any("mcp_server.py" in cmdline(p) for p in tree), "the server runs under pi"
        assert all(SECRET not in cmdline(p) for p in tree)
        assert SECRET not in json.dumps(pi.environ()), "pi gets the file's path, not the values"
    finally:
        bridge.close()
    frames = json.dumps(bridge.seen)
    for where, text in (
        ("frames", frames),
        ("log", log_file.read_text()),
        ("stderr", stderr_file.read_text()),
    ):
        assert SECRET not in text, f"the secret is in the bridge's {where}"
    assert "MCP-FIXTURE-TOKEN" in frames
    assert not (state / "mcp").exists() or not list((state / "mcp").glob("*/*.json")), "removed at exit"


async def test_acp_session_mcp_servers_reach_pi_and_the_tool_call_asks_first(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        servers = [schema.McpServerStdio.model_validate(stdio_server())]
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=servers), WAIT)
        await conn.set_config_option(config_id="model", session_id=session.session_id, value="fake/calltool")
        answer = await prompt(conn, session.session_id, f"{TOOL} over-acp")
        updates = recorder.of(session.session_id)
        assert answer.stop_reason == "end_turn"
        expected = f"{TOKEN} over-acp secret={secret_digest(SECRET)}"
        assert expected in text_of(updates), text_of(updates)
        calls = [u for u in updates if u.session_update == "tool_call"]
        assert calls and TOOL in calls[0].title
        [asked] = recorder.permission_requests
        assert TOOL in (asked.tool_call.title or ""), "the MCP tool goes through approvals"
        done = [u for u in updates if u.session_update == "tool_call_update" and u.status == "completed"]
        assert done and expected in json.dumps([d.model_dump(mode="json") for d in done])
        loaded = conn.load_session(cwd=str(tmp_path), session_id=session.session_id, mcp_servers=[])
        await asyncio.wait_for(loaded, WAIT)
        await prompt(conn, session.session_id, f"{TOOL} after-load")
        said = text_of(recorder.of(session.session_id))
        assert f"No tool named {TOOL} is offered" in said, "session/load's set (none) holds from then on"


async def test_acp_advertises_mcp_capabilities_and_refuses_a_bad_entry_by_name(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, _, _):
        answer = await conn.initialize(protocol_version=1)
        mcp = answer.agent_capabilities.mcp_capabilities if answer.agent_capabilities else None
        assert mcp is not None and mcp.http is True and mcp.sse is False
        sse = schema.SseMcpServer(type="sse", name="s", url="http://127.0.0.1:9/sse", headers=[])
        with pytest.raises(RequestError) as refused:
            await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[sse]), WAIT)
        assert refused.value.code == -32602 and "mcpServers.0" in str(refused.value), refused.value
        assert (
            await prompt(conn, await new_session(conn, tmp_path, "echo"), "still here")
        ).stop_reason == "end_turn"


@pytest.fixture
def http_fixture() -> Iterator[str]:
    """The fixture server over streamable HTTP on 127.0.0.1; its URL once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "MCP_FIXTURE_SECRET": SECRET}
    server = subprocess.Popen(
        [sys.executable, str(FIXTURE), "http", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the HTTP MCP fixture did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait(timeout=WAIT)


async def test_lsp_an_http_mcp_server_s_tool_is_called(
    bridge: LanguageClient, http_fixture: str, tmp_path: Path
) -> None:
    server = {"type": "http", "name": "remote", "url": http_fixture,
              "headers": [{"name": "Authorization", "value": "Bearer $NOT_EXPANDED"}]}  # fmt: skip
    params = call_params(tmp_path, "over-http", [server], "mcp__remote__echo_token")
    result = await request(bridge, "pi/run", params)
    assert result["status"] == "completed", result
    assert f"{TOKEN} over-http secret={secret_digest(SECRET)}" in result["text"], result
