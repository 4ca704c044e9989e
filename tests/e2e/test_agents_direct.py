"""OpenCode (`opencode acp`) and Gemini CLI (`gemini --acp`), installed by scripts/setup.sh, driven
directly by the official ACP Python SDK's client against the scripted model on 127.0.0.1: no
bridge. They prove the offline recipes of docs/agents-facts.md (bridge/scripted_model/
agent_configs.py) before any adapter relies on them.

Each test spawns the agent in a temp HOME it owns, with the scenario chosen in the agent's own
configuration, and judges from what the client and the scripted model received and from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
from acp import RequestError, schema, spawn_agent_process
from acp.client.connection import ClientSideConnection

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.agent_configs import gemini_env, opencode_env
from tests.support.env import ROOT

AGENTS_BIN = ROOT / ".tools-agents" / "node_modules" / ".bin"
#: Starting a Node/Bun agent on a loaded 2-core machine takes seconds: generous, never a sleep.
WAIT = 90.0

COMMANDS: dict[str, tuple[list[str], Callable[[Path, str, str], dict[str, str]]]] = {
    "opencode": ([str(AGENTS_BIN / "opencode"), "acp"], opencode_env),
    "gemini": ([str(AGENTS_BIN / "gemini"), "--acp"], gemini_env),
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (AGENTS_BIN / "opencode").exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
        reason="the other agents are not installed in .tools-agents (run scripts/setup.sh)",
    ),
]


@dataclass
class Client:
    """The ACP client half: records updates, allows once, serves fs against the disk."""

    updates: list[Any] = field(default_factory=list)
    permissions: list[schema.RequestPermissionRequest] = field(default_factory=list)
    fs_calls: list[tuple[str, str]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def request_permission(
        self, options: list[schema.PermissionOption], session_id: str, tool_call: Any, **kwargs: Any
    ) -> Any:
        self.permissions.append(
            schema.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=options)
        )
        option = next(o for o in options if o.kind == "allow_once")
        return {"outcome": {"outcome": "selected", "optionId": option.option_id}}

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> Any:
        self.fs_calls.append(("read", path))
        file = Path(path)
        # Gemini CLI reads a file before writing it: a missing one must be answered empty.
        return {"content": file.read_text(encoding="utf-8") if file.exists() else ""}

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> Any:
        self.fs_calls.append(("write", path))
        Path(path).write_text(content, encoding="utf-8")
        return {}

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    def text(self) -> str:
        return "".join(
            u.content.text
            for u in self.updates
            if u.session_update == "agent_message_chunk" and getattr(u.content, "text", None)
        )

    def chunks(self) -> int:
        return sum(1 for u in self.updates if u.session_update == "agent_message_chunk")

    def tool_updates(self) -> list[Any]:
        return [u for u in self.updates if u.session_update in ("tool_call", "tool_call_update")]

    async def wait_for(self, predicate: Callable[[Any], bool], timeout: float = WAIT) -> Any:
        async with asyncio.timeout(timeout):
            while True:
                for update in self.updates:
                    if predicate(update):
                        return update
                self.changed.clear()
                await self.changed.wait()


@dataclass
class Agent:
    conn: ClientSideConnection
    client: Client
    process: asyncio.subprocess.Process
    session_id: str
    cwd: Path
    model: ScriptedModelServer

    async def prompt(self, text: str) -> Any:
        blocks: list[Any] = [schema.TextContentBlock(type="text", text=text)]
        return await asyncio.wait_for(self.conn.prompt(session_id=self.session_id, prompt=blocks), WAIT)


@contextlib.asynccontextmanager
async def agent(name: str, scenario: str, tmp_path: Path) -> AsyncIterator[Agent]:
    """`name` in ACP mode on scenario `scenario`, initialized with fs offered, one session open."""
    command, recipe = COMMANDS[name]
    cwd = tmp_path / "ws"
    cwd.mkdir()
    with ScriptedModelServer(delay_scale=0.0) as model:
        env = {**os.environ, **recipe(tmp_path / "home", f"http://127.0.0.1:{model.port}", scenario)}
        client = Client()
        stderr = (tmp_path / "stderr.log").open("w")
        try:
            async with spawn_agent_process(
                cast(Any, client), *command, env=env, cwd=cwd, transport_kwargs={"stderr": stderr}
            ) as (conn, process):
                fs = schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
                capabilities = schema.ClientCapabilities(fs=fs, terminal=False)
                await asyncio.wait_for(
                    conn.initialize(protocol_version=1, client_capabilities=capabilities), WAIT
                )
                session = await asyncio.wait_for(conn.new_session(cwd=str(cwd), mcp_servers=[]), WAIT)
                yield Agent(conn, client, process, session.session_id, cwd, model)
        finally:
            stderr.close()


def model_requests(model: ScriptedModelServer, scenario: str) -> list[dict[str, Any]]:
    """The scripted model's requests for the scenario (not an agent's title or helper calls)."""
    return [r for r in model.requests if r["model"] == scenario]


@pytest.mark.parametrize("name", ["opencode", "gemini"])
async def test_a_prompt_is_answered_with_streamed_text(name: str, tmp_path: Path) -> None:
    async with agent(name, "text", tmp_path) as a:
        answer = await a.prompt("Say hello")
        assert answer.stop_reason == "end_turn"
        assert a.client.text() == (
            "Hello from the fake model. This reply is streamed in many small pieces so that a "
            "client can observe message_update events one delta at a time. It ends here."
        )
        assert a.client.chunks() > 5
        assert a.model.last_user_text("text") == "Say hello"


@pytest.mark.parametrize("name", ["opencode", "gemini"])
async def test_a_tool_call_runs_and_closes(name: str, tmp_path: Path) -> None:
    async with agent(name, "tool", tmp_path) as a:
        answer = await a.prompt("Run it")
        assert answer.stop_reason == "end_turn"
        tools = a.client.tool_updates()
        assert tools and tools[0].session_update == "tool_call"
        assert {u.tool_call_id for u in tools} == {tools[0].tool_call_id}
        assert tools[-1].status == "completed"
        # The second request carries the command's output; the answer is what it printed.
        requests = model_requests(a.model, "tool")
        assert len(requests) == 2
        assert "hi" in a.client.text()
        assert a.client.text().startswith("Let me run that command.")


@pytest.mark.parametrize("name", ["opencode", "gemini"])
async def test_a_cancel_mid_command_ends_the_turn_and_leaves_no_process(name: str, tmp_path: Path) -> None:
    # A duration no other test uses: the command is found in /proc by it alone.
    duration = f"30.{secrets.randbelow(10**6):06d}"
    async with agent(name, "shell", tmp_path) as a:
        turn = asyncio.ensure_future(a.prompt(f"sleep {duration}"))

        def sleepers() -> list[psutil.Process]:
            found = []
            for proc in psutil.process_iter(["cmdline"]):
                with contextlib.suppress(psutil.Error):
                    if duration in " ".join(proc.info["cmdline"] or []):
                        found.append(proc)
            return found

        async with asyncio.timeout(WAIT):
            while not sleepers():
                assert not turn.done(), turn.result()
                await asyncio.sleep(0.05)
        await a.conn.cancel(session_id=a.session_id)
        answer = await asyncio.wait_for(turn, WAIT)
        assert answer.stop_reason == "cancelled"
        async with asyncio.timeout(10):
            while sleepers():
                await asyncio.sleep(0.05)
        assert a.process.returncode is None, "the agent itself lives on after a cancel"


async def test_gemini_writes_through_the_clients_fs_write_text_file(tmp_path: Path) -> None:
    script = '[["write_file", {"file_path": "new.txt", "content": "hello\\n"}]]'
    async with agent("gemini", "script", tmp_path) as a:
        answer = await a.prompt(script)
        assert answer.stop_reason == "end_turn"
        target = str(a.cwd / "new.txt")
        assert ("write", target) in a.client.fs_calls
        assert (a.cwd / "new.txt").read_text() == "hello\n"
        # It asked first: a write is not an auto-approved tool in Gemini CLI's default mode.
        assert len(a.client.permissions) == 1


async def test_opencode_runs_its_tools_itself_without_asking(tmp_path: Path) -> None:
    script = '[["write", {"filePath": "new.txt", "content": "hello\\n"}]]'
    async with agent("opencode", "script", tmp_path) as a:
        answer = await a.prompt(script)
        assert answer.stop_reason == "end_turn"
        assert (a.cwd / "new.txt").read_text() == "hello\n"
        assert a.client.fs_calls == []


def test_agents_answer_their_version(tmp_path: Path) -> None:
    for binary, expected in (("opencode", "1.18.33"), ("gemini", "0.61.0"), ("codex", "codex-cli 0.171.0")):
        env = {**os.environ, "HOME": str(tmp_path)}
        out = subprocess.run(
            [str(AGENTS_BIN / binary), "--version"],
            check=True,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert out.stdout.strip().splitlines()[-1] == expected
