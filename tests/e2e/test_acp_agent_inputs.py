"""What a run hands an ACP agent besides its prompt: its images (ACP image blocks) and the
conversation's MCP servers (session/new's `mcpServers`), judged from the scripted model's received
requests, the stream and /proc. The agents and their fixtures are test_acp_agents.py's.
"""

# ruff: noqa: F811 (test_acp_agents.py's fixtures, imported by name, are the tests' parameters)

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import pytest_lsp
from acp import schema
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import trailing_tool_result, user_images_of
from tests.e2e.test_acp_agents import (  # noqa: F401 (the fixtures are used by name)
    FAST_RETRY,
    SLOW_COMMAND,
    _acp_front,
    _config,
    agent,
    agent_env,
    agent_processes,
    bridge,
    claude_acp_bridge,
    gemini_bridge,
    opencode_bridge,
    pi_acp_bridge,
    requests_of,
    requires_acp_agents,
    run,
    run_params,
)
from tests.e2e.test_mcp import SECRET, cmdline, stdio_server
from tests.fixtures.mcp_server import TOKEN, secret_digest
from tests.support.acp import prompt
from tests.support.env import WAIT, requires_pi
from tests.support.leaks import assert_no_run_processes, run_processes, wait_for_run_process
from tests.support.lsp import initialize, messages_of, request
from tests.support.model_requests import PIXEL_PNG
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, requires_acp_agents, pytest.mark.realpi, pytest.mark.slow]


async def test_an_image_reaches_the_model_with_the_prompt(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, agent: str
) -> None:
    tag = os.urandom(4).hex()
    image = {"mimeType": "image/png", "data": PIXEL_PNG}
    result, messages = await run(bridge, run_params(agent, "echo", f"see-{tag}", tmp_path, images=[image]))
    assert result["status"] == "completed", messages[-1]["content"]
    # Claude Code adds a line naming where it stored the image to the prompt's text
    assert result["text"].startswith(f"ECHO:see-{tag}"), result["text"]
    # the conversation's request (not Claude Code's title request: it offers no tools)
    [seen] = [r for r in requests_of(scripted_model, "echo") if f"see-{tag}" in json.dumps(r["body"])]
    assert user_images_of(seen["body"]) == [f"data:image/png;base64,{PIXEL_PNG}"], "the image, as sent"


#: The name each agent offers the fixture's `echo_token` tool under (server `fixture`). Not pi-acp:
#: it takes `mcpServers`, but its pi offers the model no tool of theirs (pi has no MCP client).
MCP_TOOLS = {
    "claude-acp": "mcp__fixture__echo_token",
    "opencode": "fixture_echo_token",
    "gemini": "mcp_fixture_echo_token",
}
#: A built-in command tool the `calltool` scenario calls to run SLOW_COMMAND, and its arguments.
COMMAND_TOOLS = {
    "claude-acp": ("Bash", {"command": SLOW_COMMAND}),
    "opencode": ("bash", {"command": SLOW_COMMAND, "description": "waits"}),
    "gemini": ("run_shell_command", {"command": SLOW_COMMAND}),
}


def mcp_servers_of(pid: int) -> list[psutil.Process]:
    """The fixture MCP servers among `pid`'s descendants (none once it is gone)."""
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if "mcp_server.py" in cmdline(p)]
    except psutil.Error:
        return []


@pytest_lsp.fixture(config=_config("claude-acp"))
async def claude_acp_mcp_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge on claude-acp whose Claude Code offers MCP tools by name: by default it defers
    them behind its ToolSearch tool, which the scripted model does not call."""
    env = agent_env(scripted_model, pi_agent_dir, Path(tempfile.mkdtemp(prefix="claude-acp-config-")))
    env["ENABLE_TOOL_SEARCH"] = "false"
    await initialize(lsp_client, {"env": env, "silenceTimeoutMs": 60000, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest.fixture
def mcp_bridge(request: pytest.FixtureRequest, agent: str) -> LanguageClient:
    """The LSP bridge of the test's agent, offering MCP tools by name."""
    name = "claude_acp_mcp_bridge" if agent == "claude-acp" else f"{agent.replace('-', '_')}_bridge"
    client: LanguageClient = request.getfixturevalue(name)
    return client


@pytest.mark.parametrize("agent", list(MCP_TOOLS))
async def test_an_mcp_tool_is_called_its_result_reaches_the_model_and_a_cancel_leaves_nothing(
    mcp_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, agent: str
) -> None:
    tool, text = MCP_TOOLS[agent], f"over-{agent}-{os.urandom(3).hex()}"
    servers = [stdio_server()]
    result, messages = await run(
        mcp_bridge, run_params(agent, "calltool", f"{tool} {text}", tmp_path, mcpServers=servers)
    )
    expected = f"{TOKEN} {text} secret={secret_digest(SECRET)}"
    assert result["status"] == "completed" and expected in result["text"], messages[-1]["content"]
    [call] = [m["content"] for m in messages if m["type"] == "tool.call"]
    [done] = [m["content"] for m in messages if m["type"] == "tool.completed"]
    assert done["toolCallId"] == call["toolCallId"] and expected in done["output"], done
    bodies = [r["body"] for r in scripted_model.requests if r["model"] == "calltool"]
    assert any(expected in (trailing_tool_result(body) or "") for body in bodies), "the model got the result"
    assert SECRET not in json.dumps(bodies) + json.dumps(messages), "the secret reached the server alone"
    [pid] = agent_processes(agent)
    helpers = mcp_servers_of(pid)
    assert helpers, "the MCP server runs inside the agent's process tree, and outlives the run"
    # a cancel mid-command, the MCP server running: the command goes, nothing escapes the tree
    run_id = f"cancel-{os.urandom(3).hex()}"
    command, arguments = COMMAND_TOOLS[agent]
    params = run_params(
        agent,
        "calltool",
        f"{command} {json.dumps(arguments)}",
        tmp_path,
        sessionId=result["sessionId"],
        mcpServers=servers,
        runId=run_id,
    )
    task = asyncio.ensure_future(request(mcp_bridge, "pi/run", params))
    await messages_of(mcp_bridge).wait_type(run_id, "tool.call")
    sleeper = await wait_for_run_process("sleep 30")
    answer = await request(mcp_bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await task
    assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    assert answer["shutdown"]["survivors"] == []
    assert not psutil.pid_exists(sleeper.pid) or sleeper.status() == psutil.STATUS_ZOMBIE
    assert [p for p in run_processes() if "sleep" in cmdline(p)] == [], "nothing of the command is left"
    assert_stream_invariants(messages_of(mcp_bridge).by_run[run_id])
    await assert_mcp_servers_are_the_live_agents(agent, helpers)


def running(processes: list[psutil.Process]) -> set[int]:
    """The pids of `processes` still running (zombies count as gone)."""
    alive = set()
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.add(process.pid)
        except psutil.Error:
            continue
    return alive


async def assert_mcp_servers_are_the_live_agents(agent: str, helpers: list[psutil.Process]) -> None:
    """Every MCP server of `helpers` still running is under the live agent process and in its
    containment (the conversation's cgroup, or tagged as a run's process: what the bridge stops
    with the agent). An agent may restart its MCP server; the one it replaced goes on its own
    (polled: no event tells)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        inside = {h.pid for p in agent_processes(agent) if psutil.pid_exists(p) for h in mcp_servers_of(p)}
        left = running(helpers) - inside
        if not left:
            break
        assert asyncio.get_running_loop().time() < deadline, f"MCP servers outside the agent: {left}"
        await asyncio.sleep(0.05)
    live = agent_processes(agent)
    if not live:  # the cancel ended the agent too (then none of its servers runs: waited above)
        return
    [pid] = live
    if cgroup_of(pid) != cgroup_of(os.getpid()):  # the conversation's own cgroup: it stops them all
        # (an agent that restarts its Claude Code on a cancel may have ended them all: none is left)
        cgroups = {group for h in running(helpers) if (group := cgroup_of(h))}
        assert cgroups <= {cgroup_of(pid)}, "in the agent's cgroup"
    else:  # tree containment: they carry the run's token (Gemini CLI's servers get no env of it)
        assert running(helpers) <= {p.pid for p in run_processes()}, "tagged as the run's processes"


def cgroup_of(pid: int) -> str:
    """The cgroup (v2) of `pid` ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text().strip().rpartition(":")[2]
    except OSError:
        return ""


@pytest.mark.parametrize("agent", ["opencode"])
async def test_a_loaded_session_gets_the_mcp_servers_again(
    mcp_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, agent: str
) -> None:
    """The conversation's agent gone, its next prompt loads the session (`session/load`) in a new
    process, which gets the MCP servers as `session/new` did."""
    tool, servers = MCP_TOOLS[agent], [stdio_server()]
    first, _ = await run(
        mcp_bridge, run_params(agent, "calltool", f"{tool} one", tmp_path, mcpServers=servers)
    )
    assert first["status"] == "completed" and TOKEN in first["text"], first["text"]
    [pid] = agent_processes(agent)
    psutil.Process(pid).kill()
    await wait_gone(pid)
    text = f"two-{os.urandom(3).hex()}"
    # a prompt that races the bridge's noticing the death fails retryable: its retry loads it
    session = {"sessionId": first["sessionId"], "mcpServers": servers, "retry": FAST_RETRY}
    params = run_params(agent, "calltool", f"{tool} {text}", tmp_path, **session)
    after, messages = await run(mcp_bridge, params)
    assert after["status"] == "completed", messages[-1]["content"]
    assert after["sessionId"] == first["sessionId"] and f"{TOKEN} {text}" in after["text"], after["text"]
    assert agent_processes(agent) != [pid], "a new process loaded the session"


async def wait_gone(pid: int) -> None:
    """Until `pid` is gone or a zombie (polled: no event tells of another process's end)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while alive(pid):
        assert asyncio.get_running_loop().time() < deadline, f"{pid} did not end"
        await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        return bool(running([psutil.Process(pid)]))
    except psutil.Error:
        return False


async def test_the_acp_front_s_mcp_servers_reach_opencode_and_its_tool_result_reaches_the_model_once(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    """session/new's `mcpServers` through the ACP front reach OpenCode: its model calls the tool,
    the result reaches the model once, the editor sees the call, and the secret only the server."""
    async with _acp_front("opencode", "calltool", scripted_model, pi_agent_dir, tmp_path) as (
        conn,
        recorder,
        _,
    ):
        servers = [schema.McpServerStdio.model_validate(stdio_server())]
        opened = conn.new_session(cwd=str(tmp_path / "work"), mcp_servers=servers)
        sid, text = (await asyncio.wait_for(opened, WAIT)).session_id, f"front-{os.urandom(3).hex()}"
        answer = await prompt(conn, sid, f"{MCP_TOOLS['opencode']} {text}", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        expected = f"{TOKEN} {text} secret={secret_digest(SECRET)}"
        bodies = [r["body"] for r in scripted_model.requests if r["model"] == "calltool"]
        results = [body for body in bodies if expected in (trailing_tool_result(body) or "")]
        assert len(results) == 1, "the tool's result reached the model once"
        updates = recorder.of(sid)
        [call] = [u for u in updates if u.session_update == "tool_call"]
        done = [
            u
            for u in updates
            if u.session_update == "tool_call_update"
            and u.tool_call_id == call.tool_call_id
            and u.status == "completed"
        ]
        assert done and expected in json.dumps([d.model_dump(mode="json") for d in done]), (
            "the editor sees it"
        )
        frames = json.dumps([u.model_dump(mode="json") for u in updates])
        assert SECRET not in json.dumps(bodies) + frames, "the secret reached the MCP server alone"
    await assert_no_run_processes()
