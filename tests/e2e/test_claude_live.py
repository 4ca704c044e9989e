"""Claude Code's live mode through the LSP front: `pi-bridge --agent claude` keeps one Claude Code
process per conversation, against the real Claude Code and the scripted model's Anthropic API.

The processes are counted by the live conversations `pi/runs` lists (their pids) and by the
run's own pid; a Claude Code process killed between turns is replaced by one resuming the session.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.support.env import BRIDGE, CLAUDE_BIN, WAIT, claude_stored, requires_claude
from tests.support.leaks import (
    assert_no_run_processes,
    run_processes,
    run_processes_alive,
    wait_for_run_process,
)
from tests.support.lsp import BridgeServerConfig, initialize, make_client, messages_of, request
from tests.support.model_requests import times_seen
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_claude, pytest.mark.realpi]

CLAUDE_PATH = os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")])
CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "claude"],
    client_factory=make_client,
    extra_env={"PATH": CLAUDE_PATH},
)


@pytest.fixture
def claude_config_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "claude-config"
    folder.mkdir()
    return folder


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, claude_config_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge whose own agent is Claude Code, against the scripted model."""
    options = {
        "env": {
            "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": str(claude_config_dir),
        },
        "silenceTimeoutMs": 30000,
        "warmPool": False,  # its runs go to their own folders: a spare in the root is never taken
    }
    await initialize(lsp_client, options)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def run(
    client: LanguageClient, model: str, **params: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = await request(client, "pi/run", {"prompt": "Say hello", "model": model, **params})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def live_pids(client: LanguageClient, session_id: str) -> list[int]:
    runs = await request(client, "pi/runs", {})
    return [entry["pid"] for entry in runs["live"] if entry["sessionId"] == session_id]


async def test_three_turns_of_a_conversation_run_on_one_claude_code_process(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, messages = await run(bridge, "echo", prompt=f"one-{tag}", cwd=str(tmp_path))
    assert first["status"] == "completed" and first["text"] == f"ECHO:one-{tag}"
    assert messages[0]["type"] == "session.started"
    sid = first["sessionId"]
    [pid] = await live_pids(bridge, sid)
    for turn in ("two", "three"):
        result, messages = await run(bridge, "echo", prompt=f"{turn}-{tag}", cwd=str(tmp_path), sessionId=sid)
        assert result["status"] == "completed" and result["sessionId"] == sid
        assert messages[0]["type"] == "session.resumed"
        assert await live_pids(bridge, sid) == [pid], "the same Claude Code process serves every turn"
    seen = str([r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]["messages"])
    assert all(f"{turn}-{tag}" in seen for turn in ("one", "two", "three")), "the model saw every turn"
    claude = psutil.Process(pid)
    assert claude.is_running() and claude.create_time() < time.time()


async def test_a_follow_up_streams_its_first_message_within_3_s(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    first, _ = await run(bridge, "echo", prompt="first", cwd=str(tmp_path))
    started = time.monotonic()
    run_id = f"follow-up-{os.urandom(3).hex()}"
    task = asyncio.ensure_future(
        request(bridge, "pi/run", {"prompt": "again", "model": "echo", "cwd": str(tmp_path),
                                   "sessionId": first["sessionId"], "runId": run_id})
    )  # fmt: skip
    await messages_of(bridge).wait_type(run_id, "assistant", timeout=WAIT)
    first_message = time.monotonic() - started
    result = await task
    assert result["status"] == "completed" and result["text"] == "ECHO:again"
    assert first_message < 3.0, f"the follow-up's first text came after {first_message:.2f} s"


async def test_a_claude_code_killed_between_turns_is_resumed_by_the_next(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, claude_config_dir: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await run(bridge, "echo", prompt=f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    [pid] = await live_pids(bridge, sid)
    # Claude Code writes its session lazily, after the turn's result: a kill before that loses the
    # turn with the process (nothing is stored to resume). Killed once the turn is stored.
    await claude_stored(claude_config_dir, sid, f"ECHO:before-{tag}")
    claude = psutil.Process(pid)
    claude.kill()
    claude.wait(WAIT)
    result, messages = await run(bridge, "echo", prompt=f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert result["status"] == "completed" and result["sessionId"] == sid
    assert messages[0]["type"] == "session.resumed"
    [new_pid] = await live_pids(bridge, sid)
    assert new_pid != pid
    seen = str([r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]["messages"])
    assert f"before-{tag}" in seen and f"after-{tag}" in seen, "the new process resumed the session"


async def test_close_session_stops_the_live_claude_code(bridge: LanguageClient, tmp_path: Path) -> None:
    first, _ = await run(bridge, "echo", prompt="hello", cwd=str(tmp_path))
    [pid] = await live_pids(bridge, first["sessionId"])
    answer = await request(bridge, "pi/closeSession", {"sessionId": first["sessionId"]})
    assert answer["closed"] is True
    assert run_processes_alive([pid]) == []
    assert await live_pids(bridge, first["sessionId"]) == []


async def test_cancel_mid_bash_interrupts_and_the_same_process_serves_the_next_turn(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    first, _ = await run(bridge, "echo", prompt="first", cwd=str(tmp_path))
    sid = first["sessionId"]
    [pid] = await live_pids(bridge, sid)
    run_id = f"cancel-bash-{os.urandom(3).hex()}"
    task = asyncio.ensure_future(
        request(bridge, "pi/run", {"prompt": "go", "model": "toolslow", "cwd": str(tmp_path),
                                   "sessionId": sid, "runId": run_id})
    )  # fmt: skip
    await messages_of(bridge).wait_type(run_id, "tool.call")
    sleeper = await wait_for_run_process("sleep 30")
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await task
    assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    receipt = answer["shutdown"]
    assert receipt["survivors"] == [] and run_processes_alive([sleeper.pid]) == []
    assert sleeper.pid in receipt["pids"], "the Bash tool's process was the run's, and it is gone"
    messages = messages_of(bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    failed = [m for m in messages if m["type"] == "tool.failed"]
    assert failed and failed[0]["content"].get("cancelled") is True
    after, _ = await run(bridge, "echo", prompt="after the cancel", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["text"].startswith("ECHO:")
    if receipt["agentKept"]:
        assert receipt["stage"] == "interrupted"
        assert await live_pids(bridge, sid) == [pid], "the interrupted Claude Code served the next turn"
    else:
        assert await live_pids(bridge, sid) != [pid], "a new process resumed the session"


# A 1x1 transparent PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


async def test_an_image_reaches_the_model_as_an_image_block(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    images = [{"mimeType": "image/png", "data": PNG}]
    result, _ = await run(bridge, "echo", prompt="what is this?", cwd=str(tmp_path), images=images)
    assert result["status"] == "completed" and result["text"] == "ECHO:what is this?"
    body = [r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]
    blocks = [
        block
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]
    assert [block["source"] for block in blocks] == [
        {"type": "base64", "media_type": "image/png", "data": PNG}
    ]


async def test_a_retried_prompt_is_seen_once_with_the_turn_before_it(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await run(bridge, "echo", prompt=f"before-{tag}", cwd=str(tmp_path))
    scripted_model.reset()  # flaky: two failures, then an answer
    retry = {"maxAttempts": 3, "initialDelayMs": 0}
    result, messages = await run(
        bridge, "flaky", prompt=f"retried-{tag}", cwd=str(tmp_path), sessionId=first["sessionId"], retry=retry
    )
    assert (result["status"], result["attempts"]) == ("completed", 3)
    assert result["sessionId"] == first["sessionId"]
    bodies = [r["body"] for r in scripted_model.requests if r["model"] == "flaky"]
    assert [times_seen(body, tag, "before", "retried") for body in bodies] == [[1, 1]] * 3


async def test_a_run_s_thinking_level_reaches_the_model_as_claude_code_s_effort(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    result, _ = await run(bridge, "echo", prompt="think less", cwd=str(tmp_path), thinking="minimal")
    assert result["status"] == "completed", result
    body = [r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]
    assert body["output_config"]["effort"] == "low", body.get("output_config")
    (tmp_path / "other").mkdir()  # another conversation: a process started without a level
    plain, _ = await run(bridge, "echo", prompt="no level", cwd=str(tmp_path / "other"))
    assert plain["status"] == "completed", plain
    body = [r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]
    assert body.get("output_config", {}).get("effort") != "low", "no level: Claude Code's own default"


async def test_the_toolbox_on_claude_code_lists_its_commands_refuses_what_it_cannot_do_and_deletes(
    bridge: LanguageClient, tmp_path: Path, claude_config_dir: Path
) -> None:
    listed = await request(bridge, "pi/commands", {"cwd": str(tmp_path)})
    names = [c["name"] for c in listed["commands"]]
    assert names[:5] == ["compact", "autocompact", "name", "export", "new"]
    # Claude Code's own, as its `initialize` names them (its skills and custom commands).
    assert [c for c in listed["commands"] if c["source"] == "extension"], listed
    first, _ = await run(bridge, "echo", cwd=str(tmp_path), sessionId=listed["sessionId"])
    session = first["sessionId"]
    await claude_stored(claude_config_dir, session, "ECHO:")
    refused, _ = await run(bridge, "echo", prompt="/compact", cwd=str(tmp_path), sessionId=session)
    assert refused["status"] == "failed" and refused["error"]["kind"] == "usage", refused
    assert "Claude Code" in refused["error"]["message"]
    with pytest.raises(JsonRpcException) as not_renamed:
        await request(bridge, "pi/renameSession", {"sessionId": session, "title": "x"})
    assert "Claude Code" in not_renamed.value.message
    assert await request(bridge, "pi/deleteSession", {"sessionId": session}) == {"deleted": True}
    assert not list(claude_config_dir.glob(f"projects/*/{session}.jsonl"))


async def test_checkpoints_on_claude_code_rewind_files_and_refuse_a_conversation_rewind(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"  # the test's Claude config dir is in tmp_path
    workspace.mkdir()
    (workspace / "old.txt").write_text("old\n")
    first, _ = await run(bridge, "shell", prompt="echo made > new.txt && rm old.txt", cwd=str(workspace))
    session = first["sessionId"]
    await run(bridge, "shell", prompt="echo x > extra.txt", cwd=str(workspace), sessionId=session)
    deadline = time.monotonic() + WAIT
    while True:
        listed = await request(bridge, "pi/checkpoints", {"sessionId": session})
        if len(listed["checkpoints"]) == 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert [c["files"] for c in listed["checkpoints"]] == [["new.txt", "old.txt"], ["extra.txt"]], listed
    first_point = listed["checkpoints"][0]["checkpointId"]
    done = await request(
        bridge, "pi/rewind", {"sessionId": session, "checkpointId": first_point, "restore": "files"}
    )
    assert done["restored"] == ["extra.txt", "new.txt", "old.txt"]
    assert (workspace / "old.txt").read_text() == "old\n" and not (workspace / "new.txt").exists()
    with pytest.raises(JsonRpcException) as refused:
        await request(
            bridge,
            "pi/rewind",
            {"sessionId": session, "checkpointId": first_point, "restore": "conversation"},
        )
    assert "Claude Code" in refused.value.message


async def test_a_stop_leaves_nothing_queued_that_claude_code_sends_later(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await run(bridge, "echo", prompt=f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    run_id = f"stopped-{tag}"
    stopped = asyncio.ensure_future(
        request(bridge, "pi/run", {"prompt": f"long-{tag}", "model": "slow", "cwd": str(tmp_path),
                                   "sessionId": sid, "runId": run_id})
    )  # fmt: skip
    await messages_of(bridge).wait_type(run_id, "assistant")
    steer = await request(bridge, "pi/steer", {"runId": run_id, "message": f"steer-{tag}"})
    assert steer["accepted"] is False, "Claude Code takes no steer: the user keeps their text"
    queued_id = f"queued-{tag}"
    queued = asyncio.ensure_future(
        request(bridge, "pi/run", {"prompt": f"queued-{tag}", "model": "echo", "cwd": str(tmp_path),
                                   "sessionId": sid, "runId": queued_id})
    )  # fmt: skip
    assert (await messages_of(bridge).wait_type(queued_id, "run.queued"))["content"]["reason"] == "session"
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    assert answer["unsent"] == [f"queued-{tag}"]
    for task in (stopped, queued):
        with pytest.raises(JsonRpcException) as raised:
            await task
        assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    after, _ = await run(bridge, "echo", prompt=f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    # Claude Code joins its own notes ("[Request interrupted by user]", a /model caveat) to the
    # user message: the new prompt ends it, and nothing of the stopped run is among them.
    assert after["text"].startswith("ECHO:") and after["text"].endswith(f"after-{tag}")
    bodies = [r["body"] for r in scripted_model.requests if r["body"]]
    assert all(times_seen(body, tag, "steer", "queued") == [0, 0] for body in bodies), (
        "neither the refused steer nor the stopped queued prompt reached the model"
    )


# ------------------------------------------------------------------ chosen per run


@pytest_lsp.fixture(
    config=BridgeServerConfig(
        server_command=[*BRIDGE], client_factory=make_client, extra_env={"PATH": CLAUDE_PATH}
    )
)
async def pi_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, claude_config_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge whose own agent is pi, its runs naming Claude Code; no pre-spawned spare, so every
    agent process in /proc is a conversation's."""
    options = {
        "env": {
            "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": str(claude_config_dir),
        },
        "silenceTimeoutMs": 30000,
        "warmPool": False,
    }
    await initialize(lsp_client, options)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def claude_processes() -> list[int]:
    """This test's Claude Code processes, from /proc (its executable names the command line)."""
    found = []
    for proc in run_processes():
        try:
            if any(Path(part).name.startswith("claude") for part in proc.cmdline()[:2]):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def test_claude_code_named_by_the_runs_of_a_pi_bridge_is_live_per_conversation(
    pi_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    cwd = str(tmp_path)
    first, messages = await run(pi_bridge, "echo", prompt=f"one-{tag}", cwd=cwd, agent="claude")
    assert first["status"] == "completed" and first["text"] == f"ECHO:one-{tag}", messages[-1]
    sid = first["sessionId"]
    [pid] = claude_processes()
    assert await live_pids(pi_bridge, sid) == [pid], "the conversation is live"
    for turn in ("two", "three"):
        result, messages = await run(
            pi_bridge, "echo", prompt=f"{turn}-{tag}", cwd=cwd, sessionId=sid, agent="claude"
        )
        assert result["status"] == "completed" and result["text"] == f"ECHO:{turn}-{tag}", messages[-1]
        assert result["sessionId"] == sid and messages[0]["type"] == "session.resumed"
        assert claude_processes() == [pid], "one Claude Code process serves every turn"
    last = [r for r in scripted_model.requests if r["model"] == "echo"][-1]["body"]
    assert times_seen(last, tag, "one", "two", "three") == [1, 1, 1], "the model saw each turn once"
    # a cancel mid-command, on that conversation: answered with a receipt, nothing of it left
    run_id = f"cancel-named-{os.urandom(3).hex()}"
    task = asyncio.ensure_future(
        request(pi_bridge, "pi/run", {"prompt": "go", "model": "toolslow", "cwd": cwd,
                                      "sessionId": sid, "runId": run_id, "agent": "claude"})
    )  # fmt: skip
    await messages_of(pi_bridge).wait_type(run_id, "tool.call")
    sleeper = await wait_for_run_process("sleep 30")
    answer = await request(pi_bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(JsonRpcException) as raised:
        await task
    assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    receipt = answer["shutdown"]
    assert receipt["survivors"] == [] and run_processes_alive([sleeper.pid]) == []
    assert sleeper.pid in receipt["pids"], "the Bash tool's process was the run's, and it is gone"
    left = [p for p in run_processes() if "sleep" in " ".join(p.cmdline())]
    assert left == [], "nothing of the command is left in /proc"
    assert claude_processes() == ([pid] if receipt["agentKept"] else []), "no Claude Code but the kept one"
