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
from bridge.scripted_model.request_body import trailing_tool_result, user_images_of
from tests.e2e.test_codex import bodies_of, bridge, live_pids, pytestmark, run  # noqa: F401
from tests.e2e.test_mcp import SECRET, stdio_server
from tests.fixtures.mcp_server import TOKEN, secret_digest
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


async def test_codex_calls_the_mcp_tool_its_result_reaches_the_model_and_no_secret_is_in_argv(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    text = f"over-codex-{secrets.token_hex(3)}"
    params = {"mcpServers": [stdio_server()], "cwd": str(tmp_path)}
    result, messages = await run(bridge, "calltool", prompt=f"{TOOL} {text}", **params)
    expected = f"{TOKEN} {text} secret={secret_digest(SECRET)}"
    assert result["status"] == "completed" and expected in result["text"], messages[-1]["content"]
    [call] = [m["content"] for m in messages if m["type"] == "tool.call"]
    [done] = [m["content"] for m in messages if m["type"] == "tool.completed"]
    assert call["name"] == done["name"] == TOOL, "named as pi names an MCP tool"
    assert done["toolCallId"] == call["toolCallId"] and expected in done["output"], done
    bodies = [b for b in bodies_of(scripted_model, "calltool") if text in json.dumps(b)]
    assert any(expected in (trailing_tool_result(body) or "") for body in bodies), "the model got the result"
    assert SECRET not in json.dumps(bodies) + json.dumps(messages), "the secret reached the server alone"
    # Codex offers an MCP server's tools in a namespace of its own (Responses API `namespace`)
    [space] = [
        t for t in bodies[0]["tools"] if t.get("type") == "namespace" and t.get("name") == "mcp__fixture"
    ]
    assert [t["name"] for t in space["tools"]] == ["echo_token"], space
    [pid] = await live_pids(bridge, result["sessionId"])
    codex = psutil.Process(pid)
    servers = [p for p in codex.children(recursive=True) if "mcp_server.py" in " ".join(p.cmdline())]
    assert servers, "the MCP server runs inside Codex's process tree, and outlives the run"
    for process in (codex, *codex.children(recursive=True)):
        if process not in servers:  # the server itself is given its environment
            assert SECRET not in " ".join(process.cmdline()) + json.dumps(process.environ())
