"""The cross-agent part of the suite: each behaviour once per agent CLI (pi, Claude Code), through
the same pytest-lsp client and one bridge that has both agents, each run naming its agent.

Both agents run for real against the scripted model: pi through its `fake` provider (OpenAI
format), Claude Code through ANTHROPIC_BASE_URL (Anthropic Messages). The scenarios are the same
model ids; the scripted model calls each agent's tools in that agent's own schema.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.scripted_model import (
    EDIT_FILE,
    EDIT_NEW,
    EDIT_OLD,
    EDIT_ORIGINAL,
    TEXT_REPLY,
    WRITE_CONTENT,
    WRITE_FILE,
    ScriptedModelServer,
)
from tests.support.env import CLAUDE_BIN, ROOT, requires_claude, requires_pi
from tests.support.leaks import assert_no_run_processes, run_processes_alive, wait_for_run_process
from tests.support.lsp import bridge_config, initialize, messages_of, request
from tests.support.model_requests import times_seen
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

CLAUDE = CLAUDE_BIN
AGENTS = [pytest.param("pi", marks=requires_pi), pytest.param("claude", marks=requires_claude)]
pytestmark = [pytest.mark.realpi]


def agent_options(pi_agent_dir: Path, model: ScriptedModelServer, claude_dir: Path) -> dict[str, Any]:
    """initializationOptions with both agents against the scripted model."""
    return {
        "agents": {"claude": [str(CLAUDE)]},
        "env": {
            "PI_CODING_AGENT_DIR": str(pi_agent_dir),
            "ANTHROPIC_BASE_URL": model.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": str(claude_dir),
        },
        "silenceTimeoutMs": 30000,
    }


@pytest.fixture(scope="session")
def claude_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CLAUDE_CONFIG_DIR of its own: sessions out of $HOME."""
    return tmp_path_factory.mktemp("claude-config")


@pytest_lsp.fixture(config=bridge_config())
async def bridge(
    lsp_client: LanguageClient, pi_agent_dir: Path, scripted_model: ScriptedModelServer, claude_dir: Path
) -> AsyncIterator[LanguageClient]:
    """One bridge with both agents."""
    await initialize(
        lsp_client, {**agent_options(pi_agent_dir, scripted_model, claude_dir), "warmPool": False}
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def run_params(agent: str, model: str, **params: Any) -> dict[str, Any]:
    """pi/run params of one scenario for one agent (pi needs the scripted provider's name)."""
    base: dict[str, Any] = {"prompt": "Say hello", "model": model, "agent": agent}
    if agent == "pi":
        base["provider"] = "fake"
    return {**base, **params}


async def run(
    client: LanguageClient, agent: str, model: str, **params: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = await request(client, "pi/run", run_params(agent, model, **params))
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


def requests_of(model: ScriptedModelServer, scenario: str) -> list[dict[str, Any]]:
    return [r for r in model.requests if r["model"] == scenario]


@pytest.mark.parametrize("agent", AGENTS)
async def test_text_streams_as_deltas_that_make_the_final_text(bridge: LanguageClient, agent: str) -> None:
    result, messages = await run(bridge, agent, "text")
    assert result["status"] == "completed" and result["text"] == TEXT_REPLY
    deltas = [m for m in messages if m["type"] == "assistant"]
    assert len(deltas) > 1, "text must stream as several deltas"
    assert messages[0]["type"] == "session.started"
    assert result["sessionId"] == messages[0]["content"]["sessionId"]
    assert result["usage"]["totalTokens"] > 0
    assert result["stopReason"] == "stop"


@pytest.mark.parametrize("agent", AGENTS)
async def test_thinking_is_one_whole_thought(bridge: LanguageClient, agent: str) -> None:
    result, messages = await run(bridge, agent, "thinking")
    thoughts = [m for m in messages if m["type"] == "assistant.thought"]
    assert len(thoughts) == 1 and len(thoughts[0]["content"]["text"]) > 10
    assert "live" not in thoughts[0]["content"]
    assert result["status"] == "completed" and result["text"]


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_tool_call_is_opened_and_closed_with_its_output(bridge: LanguageClient, agent: str) -> None:
    result, messages = await run(bridge, agent, "tool")
    kinds = [m["type"] for m in messages]
    assert kinds.index("tool.call") < kinds.index("tool.completed")
    call = next(m for m in messages if m["type"] == "tool.call")
    assert call["content"]["arguments"] == {"command": "echo hi"}
    completed = next(m for m in messages if m["type"] == "tool.completed")
    assert completed["content"]["output"].strip() == "hi"
    assert result["status"] == "completed" and "hi" in result["text"]


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_failing_or_denied_tool_is_tool_failed_and_the_run_goes_on(
    bridge: LanguageClient, agent: str
) -> None:
    # pi runs it and it exits 3; Claude Code under acceptEdits denies its `exit 3` part.
    result, messages = await run(bridge, agent, "toolfail")
    failed = [m for m in messages if m["type"] == "tool.failed"]
    assert len(failed) == 1 and failed[0]["content"]["error"]
    assert "cancelled" not in failed[0]["content"]
    assert result["status"] == "completed"


@pytest.mark.parametrize("agent", AGENTS)
async def test_an_edit_carries_its_diff(bridge: LanguageClient, agent: str, tmp_path: Path) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL)
    result, messages = await run(bridge, agent, "edit", cwd=str(tmp_path))
    assert result["status"] == "completed"
    diffs = [
        m["content"]["diff"] for m in messages if m["type"] == "tool.completed" and "diff" in m["content"]
    ]
    assert len(diffs) == 1, [m for m in messages if m["type"].startswith("tool.")]
    expected = EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW)
    assert diffs[0] == {"path": str(target), "oldText": EDIT_ORIGINAL, "newText": expected, "line": 2}
    assert target.read_text() == expected


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_write_carries_its_diff_with_null_old_text(
    bridge: LanguageClient, agent: str, tmp_path: Path
) -> None:
    result, messages = await run(bridge, agent, "write", cwd=str(tmp_path))
    assert result["status"] == "completed"
    diffs = [
        m["content"]["diff"] for m in messages if m["type"] == "tool.completed" and "diff" in m["content"]
    ]
    target = tmp_path / WRITE_FILE
    whole = {"path": str(target), "oldText": None, "newText": WRITE_CONTENT, "line": 1}
    # On a loaded machine the bridge's snapshot can come after the write: then it does not claim
    # to know the old text (diff_capture.py leaves oldText and line out), and says nothing false.
    lost_before = {"path": str(target), "newText": WRITE_CONTENT}
    assert diffs in ([whole], [lost_before]), diffs


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_model_error_fails_fast_retryable_after_one_request(
    bridge: LanguageClient, agent: str, scripted_model: ScriptedModelServer
) -> None:
    before = len(requests_of(scripted_model, "err500"))
    started = time.monotonic()
    result, _ = await run(bridge, agent, "err500")
    elapsed = time.monotonic() - started
    assert result["status"] == "failed" and result["attempts"] == 1
    assert result["error"]["kind"] == "server" and result["error"]["retryable"] is True
    assert len(requests_of(scripted_model, "err500")) - before == 1, "the agent's own retries are off"
    assert elapsed < 10, f"took {elapsed:.1f} s"  # their hidden retries would take 25-90 s


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_rate_limit_is_retryable(bridge: LanguageClient, agent: str) -> None:
    result, _ = await run(bridge, agent, "err429")
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "rate_limit" and result["error"]["retryable"] is True


@pytest.mark.parametrize("agent", AGENTS)
async def test_an_auth_error_is_not_retried(
    bridge: LanguageClient, agent: str, scripted_model: ScriptedModelServer
) -> None:
    before = len(requests_of(scripted_model, "err401"))
    result, messages = await run(bridge, agent, "err401", retry={"maxAttempts": 3, "initialDelayMs": 10})
    assert result["status"] == "failed" and result["attempts"] == 1
    assert result["error"]["kind"] == "auth" and result["error"]["retryable"] is False
    assert not any(m["type"] == "run.retrying" for m in messages)
    assert len(requests_of(scripted_model, "err401")) - before == 1


@pytest.mark.parametrize("agent", AGENTS)
async def test_cancel_mid_tool_stops_the_whole_tree_with_a_receipt(
    bridge: LanguageClient, agent: str
) -> None:
    run_id = f"cancel-tool-{agent}"
    task = asyncio.ensure_future(
        request(bridge, "pi/run", run_params(agent, "toolslow", runId=run_id, prompt="go"))
    )
    await messages_of(bridge).wait_type(run_id, "tool.call")
    sleeper = await wait_for_run_process("sleep 30")
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await task
    data = raised.value.data  # type: ignore[attr-defined]
    assert data["status"] == "cancelled"
    receipt = answer["shutdown"]
    assert answer["found"] is True and receipt["survivors"] == []
    assert sleeper.pid in receipt["pids"], "the tool's detached process was found and stopped"
    assert run_processes_alive(receipt["pids"]) == []
    messages = messages_of(bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    failed = [m for m in messages if m["type"] == "tool.failed"]
    assert failed and failed[0]["content"].get("cancelled") is True
    await assert_no_run_processes(client=bridge)


@pytest.mark.parametrize("agent", AGENTS)
async def test_cancel_mid_stream_keeps_the_text_already_streamed(bridge: LanguageClient, agent: str) -> None:
    run_id = f"cancel-stream-{agent}"
    task = asyncio.ensure_future(
        request(bridge, "pi/run", run_params(agent, "slow", runId=run_id, prompt="go"))
    )
    await messages_of(bridge).wait_type(run_id, "assistant")
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await task
    data = raised.value.data  # type: ignore[attr-defined]
    assert data["status"] == "cancelled" and data["text"], "text already streamed is kept"
    assert answer["shutdown"]["survivors"] == []
    messages = messages_of(bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_follow_up_in_the_same_conversation_sees_the_first_turn(
    bridge: LanguageClient, agent: str, scripted_model: ScriptedModelServer
) -> None:
    marker = f"first turn of {agent} {os.urandom(4).hex()}"
    first, _ = await run(bridge, agent, "echo", prompt=marker)
    assert first["status"] == "completed"
    second, messages = await run(bridge, agent, "echo", prompt="and now?", sessionId=first["sessionId"])
    assert second["status"] == "completed" and second["sessionId"] == first["sessionId"]
    assert messages[0]["type"] == "session.resumed"
    body = requests_of(scripted_model, "echo")[-1]["body"]
    seen = str(body["messages"])
    assert marker in seen and "and now?" in seen, "the model saw both turns"


def bodies_of(model: ScriptedModelServer, scenario: str) -> list[dict[str, Any]]:
    return [r["body"] for r in requests_of(model, scenario)]


RETRY_THREE = {"maxAttempts": 3, "initialDelayMs": 0}


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("scenario", ["err500", "flaky"])
async def test_a_retried_prompt_of_a_conversation_is_seen_once_with_the_earlier_turn(
    bridge: LanguageClient, agent: str, scenario: str, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    first, _ = await run(bridge, agent, "echo", prompt=f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    scripted_model.reset()  # re-arms flaky: two failures, then an answer
    result, _ = await run(
        bridge, agent, scenario, prompt=f"retried-{tag}", cwd=str(tmp_path), sessionId=sid, retry=RETRY_THREE
    )
    assert (result["status"], result["attempts"]) == ("failed" if scenario == "err500" else "completed", 3)
    assert result["sessionId"] == sid
    seen = [times_seen(body, tag, "before", "retried") for body in bodies_of(scripted_model, scenario)]
    assert seen == [[1, 1]] * 3, "one request per attempt: the earlier turn and the prompt, once each"
    after, _ = await run(bridge, agent, "echo", prompt=f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed"
    [body] = bodies_of(scripted_model, "echo")
    assert times_seen(body, tag, "before", "retried", "after") == [1, 1, 1]


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_retried_first_prompt_stays_in_one_session_and_is_seen_once(
    bridge: LanguageClient, agent: str, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = os.urandom(4).hex()
    scripted_model.reset()
    result, messages = await run(
        bridge, agent, "flaky", prompt=f"first-{tag}", cwd=str(tmp_path), retry=RETRY_THREE
    )
    assert (result["status"], result["attempts"]) == ("completed", 3)
    sid = result["sessionId"]
    announced = {m["content"]["sessionId"] for m in messages if m["type"].startswith("session.")}
    assert announced == {sid}, "every attempt in the session of the first"
    assert [times_seen(body, tag, "first") for body in bodies_of(scripted_model, "flaky")] == [[1]] * 3
    listed = await request(bridge, "pi/sessions", {"cwd": str(tmp_path)})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid], "no session left of a failed attempt"
    await run(bridge, agent, "echo", prompt=f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [body] = bodies_of(scripted_model, "echo")
    assert times_seen(body, tag, "first", "after") == [1, 1]


@requires_claude
async def test_a_session_remembers_its_agent(bridge: LanguageClient) -> None:
    first, _ = await run(bridge, "claude", "text")
    params = {"prompt": "again", "model": "text", "sessionId": first["sessionId"]}
    second = await request(bridge, "pi/run", params)
    messages = messages_of(bridge).by_run[second["runId"]]
    assert second["status"] == "completed" and messages[0]["type"] == "session.resumed"
    sessions = await request(bridge, "pi/sessions", {"cwd": str(ROOT)})
    listed = {s["sessionId"]: s for s in sessions["sessions"]}
    assert listed[first["sessionId"]]["agent"] == "claude"
    history = await request(bridge, "pi/session", {"sessionId": first["sessionId"]})
    assert history["found"] is True and history["agent"] == "claude"
    assert [turn["prompt"] for turn in history["turns"]][-2:] == ["Say hello", "again"]
    assert history["turns"][0]["messages"][0] == {"type": "assistant", "content": {"text": TEXT_REPLY}}


@pytest.mark.parametrize("agent", AGENTS)
async def test_prompts_reach_the_model_verbatim(
    bridge: LanguageClient, agent: str, scripted_model: ScriptedModelServer
) -> None:
    for prompt in ["--version", "@README.md please", "-p\nsecond line\n\tthird"]:
        result, _ = await run(bridge, agent, "echo", prompt=prompt)
        assert scripted_model.last_user_text("echo") == prompt
        assert result["text"] == "ECHO:" + prompt


async def test_an_unknown_agent_is_invalid_params(bridge: LanguageClient) -> None:
    with pytest.raises(Exception, match="unknown agent 'nope'"):
        await request(bridge, "pi/run", {"prompt": "x", "agent": "nope"})


async def test_initialize_reports_the_agents_and_their_versions(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, claude_dir: Path
) -> None:
    raw = RawBridge()
    try:
        answer = raw.initialize(agent_options(pi_agent_dir, scripted_model, claude_dir))
        info = answer["result"]["capabilities"]["experimental"]["piBridge"]
        agents = {entry["name"]: entry for entry in info["agents"]}
        assert info["defaultAgent"] == "pi"
        assert agents["pi"]["found"] is True and agents["pi"]["version"] == "1.6.0"
        if CLAUDE.exists():  # else: reported as not found
            assert agents["claude"] == {
                "name": "claude", "command": [str(CLAUDE)], "found": True, "version": "2.1.197",
                "protocol": "claude", "delegates": ["permissions"],
            }  # fmt: skip
        # each agent says how it is spoken to and what it hands to the bridge (docs/agents.md)
        kinds = {name: (entry["protocol"], entry["delegates"]) for name, entry in agents.items()}
        assert kinds["pi"] == ("pi", ["fs", "terminal", "permissions"])
        assert kinds["codex"] == ("codex", ["permissions"])
        assert kinds["pi-acp"] == ("acp", [])
        assert kinds["opencode"] == ("acp", ["permissions"])
        assert kinds["gemini"] == ("acp", ["fs", "permissions"])
        assert agents["gemini"]["command"] == ["gemini", "--acp"]
    finally:
        raw.close()


# ------------------------------------------------------------------ the bridge's own end


@pytest.fixture
def raw_bridge(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, claude_dir: Path
) -> Iterator[RawBridge]:
    raw = RawBridge()
    raw.initialize(agent_options(pi_agent_dir, scripted_model, claude_dir))
    yield raw
    raw.close()


def start_tool_run(bridge: RawBridge, agent: str, run_id: str) -> int:
    msg_id = bridge.request("pi/run", run_params(agent, "toolslow", runId=run_id, prompt="go"))
    bridge.message(run_id, "tool.call", timeout=30)
    return msg_id


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("how", ["shutdown", "eof", "sigterm"])
async def test_the_bridge_ending_mid_tool_leaves_nothing(raw_bridge: RawBridge, agent: str, how: str) -> None:
    run_id = f"end-{how}-{agent}"
    start_tool_run(raw_bridge, agent, run_id)
    await wait_for_run_process("sleep 30")
    if how == "shutdown":
        answer = raw_bridge.response(raw_bridge.request("shutdown", None), timeout=15)
        assert "error" not in answer
        raw_bridge.notify("exit", None)
    elif how == "eof":
        assert raw_bridge.proc.stdin is not None
        raw_bridge.proc.stdin.close()
    else:
        raw_bridge.proc.send_signal(signal.SIGTERM)
    terminal = raw_bridge.message(run_id, "terminal.cancelled", timeout=15)
    assert terminal["content"]["shutdown"]["survivors"] == []
    raw_bridge.wait_exit(timeout=15)
    await assert_no_run_processes(timeout=1)
