"""How a run's images and a conversation's MCP servers are handed to an ACP agent and to Codex
(never an image dropped, never a secret in argv), and how Codex's approval of an MCP tool call
becomes the run's check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import orjson
import pytest

from bridge.agents.acp.catalog import CATALOG
from bridge.agents.acp.live import AcpLive
from bridge.agents.acp.mcp import session_servers
from bridge.agents.codex.live import CodexLiveMode, _elicitation_answer, _mcp_names, _mcp_tool_call
from bridge.agents.values import LiveError, RunOptions, ToolVerdict
from bridge.contract import McpEnvVariable, McpHeader, McpServerHttp, McpServerStdio, PromptImage
from bridge.process.spawn import ChildProcess
from bridge.runs.mcp_config import McpConfigFiles
from tests.support.model_requests import PIXEL_PNG

SECRET = "unit-SECRET-value-91c2"
STDIO = McpServerStdio(
    name="fixture", command="python3", args=["server.py"], env=[McpEnvVariable(name="KEY", value=SECRET)]
)
PLAIN_HTTP = McpServerHttp(type="http", name="plain", url="http://127.0.0.1:9/mcp")
HEADED_HTTP = McpServerHttp(
    type="http", name="headed", url="http://127.0.0.1:9/mcp", headers=[McpHeader(name="Auth", value=SECRET)]
)


def test_acp_servers_are_read_from_the_private_file_in_acps_form(tmp_path: Path) -> None:
    path = McpConfigFiles(tmp_path).file_for([STDIO, PLAIN_HTTP])
    servers = [
        s.model_dump(mode="json", by_alias=True, exclude_none=True) for s in session_servers(path, http=True)
    ]
    assert servers == [
        {
            "name": "fixture",
            "command": "python3",
            "args": ["server.py"],
            "env": [{"name": "KEY", "value": SECRET}],
        },
        {"type": "http", "name": "plain", "url": "http://127.0.0.1:9/mcp", "headers": []},
    ]
    assert session_servers(None, http=False) == []


def test_an_http_server_the_acp_agent_cannot_take_is_named_not_dropped(tmp_path: Path) -> None:
    path = McpConfigFiles(tmp_path).file_for([STDIO, PLAIN_HTTP])
    with pytest.raises(ValueError, match="'plain' was not given"):
        session_servers(path, http=False)


def test_codex_launch_names_its_mcp_servers_with_no_secret_in_argv(tmp_path: Path) -> None:
    path = McpConfigFiles(tmp_path).file_for([STDIO, PLAIN_HTTP, HEADED_HTTP])
    options = RunOptions(
        prompt="x", cwd=str(tmp_path), mcp_servers=(STDIO, PLAIN_HTTP, HEADED_HTTP), mcp_config=path
    )
    argv = CodexLiveMode().launch_spec(("codex",), options).argv
    assert SECRET not in json.dumps(argv)
    settings = dict(a.split("=", 1) for a in argv if a.startswith("mcp_servers."))
    assert json.loads(settings["mcp_servers.fixture.args"])[-2:] == [path, "fixture"]
    assert json.loads(settings["mcp_servers.plain.url"]) == "http://127.0.0.1:9/mcp"
    assert not any(k.startswith("mcp_servers.headed.") for k in settings), "refused at thread/start instead"
    assert _mcp_names(argv) == {"fixture", "plain"}


def test_codex_asking_before_an_mcp_tool_call_is_the_runs_check_and_answered_by_its_verdict() -> None:
    params = {
        "serverName": "fixture",
        "turnId": "turn-1",
        "_meta": {
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "echo_token",
            "tool_params": {"text": "hi"},
        },
    }
    check = _mcp_tool_call("mcpServer/elicitation/request", params)
    assert check is not None and (check.tool, check.kind, check.input) == (
        "mcp__fixture__echo_token",
        "other",
        {"text": "hi"},
    )
    assert _mcp_tool_call("mcpServer/elicitation/request", {"_meta": {}}) is None, (
        "a real elicitation is not a check"
    )
    assert orjson.loads(_elicitation_answer(7, ToolVerdict(allow=True))) == {
        "id": 7,
        "result": {"action": "accept", "content": {}},
    }
    assert orjson.loads(_elicitation_answer(7, ToolVerdict(allow=False)))["result"] == {"action": "decline"}


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write_now(self, line: bytes) -> None:
        self.lines.append(line)


class _Child:
    argv = ("pi-acp",)
    handle = None

    def __init__(self) -> None:
        self.stdin = _Stdin()


def test_an_acp_agent_that_takes_no_images_fails_the_prompt_naming_itself_and_sends_nothing() -> None:
    child = _Child()
    live = AcpLive(cast(ChildProcess, child), CATALOG["pi-acp"])
    image = PromptImage(mime_type="image/png", data=PIXEL_PNG)
    with pytest.raises(LiveError, match=r"pi \(pi-acp\)'s `session/prompt` takes no images") as refused:
        live.send_prompt_now("see", images=[image])
    assert refused.value.error_kind == "usage" and child.stdin.lines == [], "nothing was sent"
    live._images = True  # what its initialize said
    live.send_prompt_now("see", images=[image])
    [sent] = [orjson.loads(line) for line in child.stdin.lines]
    assert sent["params"]["prompt"] == [
        {"type": "image", "data": PIXEL_PNG, "mimeType": "image/png"},
        {"type": "text", "text": "see"},
    ]
