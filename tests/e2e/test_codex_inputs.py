"""What a run hands Codex besides its prompt: its images, as `turn/start` image inputs, judged from
the requests the scripted model's Responses API received. The bridge and its Codex home are
test_codex.py's.
"""

# ruff: noqa: F811 (test_codex.py's fixture, imported by name, is the tests' parameter)

from __future__ import annotations

import json
import secrets
from pathlib import Path

import psutil
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import user_images_of
from tests.e2e.test_codex import bodies_of, bridge, live_pids, pytestmark, run  # noqa: F401
from tests.e2e.test_mcp import SECRET, stdio_server
from tests.support.model_requests import PIXEL_PNG

TOOL = "mcp__fixture__echo_token"


async def test_an_image_reaches_the_model_with_the_prompt(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    images = [{"mimeType": "image/png", "data": PIXEL_PNG}]
    result, messages = await run(bridge, "echo", prompt=f"see-{tag}", cwd=str(tmp_path), images=images)
    assert result["status"] == "completed", messages[-1]["content"]
    assert result["text"] == f"ECHO:see-{tag}"
    assert await live_pids(bridge, result["sessionId"]), "the conversation's app-server took it"
    [body] = [b for b in bodies_of(scripted_model, "echo") if f"see-{tag}" in str(b)]
    assert user_images_of(body) == [f"data:image/png;base64,{PIXEL_PNG}"], "the image, as sent"


async def test_the_conversations_mcp_server_reaches_codex_and_its_tool_the_model_with_no_secret_in_argv(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    params = {"mcpServers": [stdio_server()], "cwd": str(tmp_path)}
    result, messages = await run(bridge, "calltool", prompt=f"{TOOL} x", **params)
    assert result["status"] == "completed", messages[-1]["content"]
    [body] = bodies_of(scripted_model, "calltool")
    # Codex offers an MCP server's tools in a namespace of its own (Responses API `namespace`)
    [space] = [t for t in body["tools"] if t.get("type") == "namespace" and t.get("name") == "mcp__fixture"]
    assert [t["name"] for t in space["tools"]] == ["echo_token"], space
    [pid] = await live_pids(bridge, result["sessionId"])
    codex = psutil.Process(pid)
    servers = [p for p in codex.children(recursive=True) if "mcp_server.py" in " ".join(p.cmdline())]
    assert servers, "the MCP server runs inside Codex's process tree"
    for process in (codex, *codex.children(recursive=True)):
        seen = " ".join(process.cmdline()) + json.dumps(process.environ())
        if process not in servers:  # the server itself is given its environment
            assert SECRET not in seen, process.cmdline()
