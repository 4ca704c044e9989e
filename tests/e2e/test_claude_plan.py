"""Claude Code's TodoWrite becomes the contract's `plan`, against the real Claude Code and the
scripted model (its `script` scenario makes the TodoWrite call the prompt lists): the plan the
client gets is the one the model wrote, each entry with its status, after the tool's own call.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.support.env import BRIDGE, CLAUDE_BIN, requires_claude
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, initialize, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_claude, pytest.mark.realpi]

CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "claude"],
    client_factory=make_client,
    extra_env={"PATH": os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")])},
)


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge whose agent is Claude Code, against the scripted model."""
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    options = {
        "env": {
            "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": str(config_dir),
        },
        "silenceTimeoutMs": 30000,
        "warmPool": False,
    }
    await initialize(lsp_client, options)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_todo_write_reaches_the_client_as_the_whole_plan(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Guard the division", "status": "in_progress", "activeForm": "Guarding it"},
        {"content": "Add a test", "status": "pending", "activeForm": "Adding a test"},
    ]
    prompt = json.dumps([["TodoWrite", {"todos": todos}]])
    result = await request(bridge, "pi/run", {"prompt": prompt, "model": "script", "cwd": str(tmp_path)})
    assert result["status"] == "completed", result
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    kinds = [m["type"] for m in messages]
    assert "plan" in kinds, kinds
    call = next(m for m in messages if m["type"] == "tool.call" and m["content"]["name"] == "TodoWrite")
    plan = next(m for m in messages if m["type"] == "plan")
    assert messages.index(call) < messages.index(plan), "the plan follows the call that wrote it"
    assert plan["content"] == {"entries": [{"content": t["content"], "status": t["status"]} for t in todos]}


async def test_a_subagents_tool_calls_name_the_task_call_that_made_them(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("a note for the subagent\n")
    inner = json.dumps([["Read", {"file_path": str(tmp_path / "notes.txt")}]])
    task = {"description": "Read the notes", "prompt": inner, "subagent_type": "general-purpose"}
    prompt = json.dumps([["Task", task]])
    result = await request(bridge, "pi/run", {"prompt": prompt, "model": "script", "cwd": str(tmp_path)})
    assert result["status"] == "completed", result
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    calls = [m["content"] for m in messages if m["type"] == "tool.call"]
    [parent] = [c for c in calls if c["name"] in ("Task", "Agent")]
    children = [c for c in calls if c.get("parentToolCallId") == parent["toolCallId"]]
    assert [c["name"] for c in children] == ["Read"], calls
    done = {m["content"]["toolCallId"]: m["content"] for m in messages if m["type"] == "tool.completed"}
    assert "a note for the subagent" in done[children[0]["toolCallId"]]["output"]
    assert "parentToolCallId" not in parent


async def test_task_create_and_update_reach_the_client_as_the_whole_plan(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    # Claude Code 2.1 offers TaskCreate/TaskUpdate, not TodoWrite: its task list is the plan.
    subjects = ["Read the parser", "Guard the division", "Add a test"]
    creates = [["TaskCreate", {"subject": s, "description": s, "activeForm": s}] for s in subjects]
    updates = [
        ["TaskUpdate", {"taskId": "1", "status": "completed"}],
        ["TaskUpdate", {"taskId": "2", "status": "in_progress"}],
    ]
    prompt = json.dumps(creates + updates)
    result = await request(bridge, "pi/run", {"prompt": prompt, "model": "script", "cwd": str(tmp_path)})
    assert result["status"] == "completed", result
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    assert [m for m in messages if m["type"] == "tool.failed"] == []
    plans = [m["content"] for m in messages if m["type"] == "plan"]
    assert len(plans) == 5, plans
    assert plans[0] == {"entries": [{"content": "Read the parser", "status": "pending"}]}
    assert plans[-1] == {
        "entries": [
            {"content": "Read the parser", "status": "completed"},
            {"content": "Guard the division", "status": "in_progress"},
            {"content": "Add a test", "status": "pending"},
        ]
    }
