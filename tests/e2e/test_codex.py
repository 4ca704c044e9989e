"""Codex through the LSP front: `pi-bridge --agent codex` runs the real Codex (installed in
.tools-agents by scripts/setup.sh) against the scripted model's Responses API, `codex exec --json`
per prompt. Judged from the messages the client received, the requests the model received and
/proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.agent_configs import codex_env
from tests.support.env import BRIDGE, ROOT, WAIT
from tests.support.leaks import (
    assert_no_run_processes,
    run_processes,
    run_processes_alive,
    wait_for_run_process,
)
from tests.support.lsp import BridgeServerConfig, initialize, make_client, messages_of, request
from tests.support.model_requests import times_seen
from tests.support.streams import assert_stream_invariants

CODEX_BIN = ROOT / ".tools-agents" / "node_modules" / ".bin" / "codex"
NODE_BIN = ROOT / ".tools" / "node_modules" / ".bin"
pytestmark = [
    pytest.mark.realpi,
    pytest.mark.skipif(
        not CODEX_BIN.exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
        reason="Codex is not installed in .tools-agents (run scripts/setup.sh)",
    ),
]
CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "codex"],
    client_factory=make_client,
    # The repository's Node 22 first: its wrapper then execs Codex's native binary (an older Node
    # keeps running as its parent, and the bridge would take the binary for a leftover process).
    extra_env={"PATH": os.pathsep.join([str(CODEX_BIN.parent), str(NODE_BIN), os.environ.get("PATH", "")])},
)
RETRY_THREE = {"maxAttempts": 3, "initialDelayMs": 0}


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    """A bridge whose own agent is Codex, its home (config.toml, threads) in a temp dir."""
    home = tmp_path_factory.mktemp("codex-home")
    env = codex_env(home, f"http://127.0.0.1:{scripted_model.port}")
    await initialize(lsp_client, {"env": env, "silenceTimeoutMs": 60000, "warmPool": False})
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


def bodies_of(model: ScriptedModelServer, scenario: str) -> list[dict[str, Any]]:
    return [r["body"] for r in model.requests if r["model"] == scenario]


async def test_a_prompt_is_answered_with_text_over_the_responses_api(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    result, messages = await run(bridge, "echo", prompt=f"hello-{tag}", cwd=str(tmp_path))
    assert result["status"] == "completed"
    assert result["text"] == f"ECHO:hello-{tag}"
    assert messages[0]["type"] == "session.started"
    assert "".join(m["content"]["text"] for m in messages if m["type"] == "assistant") == f"ECHO:hello-{tag}"
    mine = [r for r in scripted_model.requests if f"hello-{tag}" in json.dumps(r.get("raw") or r["body"])]
    [request_path] = {r["path"] for r in mine}
    assert request_path == "/v1/responses"
    # A follow-up resumes the thread: the model sees both turns.
    again, messages = await run(
        bridge, "echo", prompt=f"again-{tag}", cwd=str(tmp_path), sessionId=result["sessionId"]
    )
    assert again["status"] == "completed" and again["sessionId"] == result["sessionId"]
    assert messages[0]["type"] == "session.resumed"
    assert times_seen(bodies_of(scripted_model, "echo")[-1], tag, "hello", "again") == [1, 1]


async def test_text_streams_piece_by_piece(bridge: LanguageClient, tmp_path: Path) -> None:
    # `slow-10`: ten pieces 0.3 s apart (real time), so each arrives as a delta of its own.
    result, messages = await run(bridge, "slow-10", prompt="go", cwd=str(tmp_path))
    assert result["status"] == "completed"
    deltas = [m["content"]["text"] for m in messages if m["type"] == "assistant"]
    assert len(deltas) >= 5 and "".join(deltas) == result["text"], deltas


async def test_three_turns_of_a_conversation_run_on_one_codex_app_server(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    first, _ = await run(bridge, "echo", prompt=f"one-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    [pid] = await live_pids(bridge, sid)
    assert "app-server" in " ".join(psutil.Process(pid).cmdline())
    for turn in ("two", "three"):
        result, messages = await run(bridge, "echo", prompt=f"{turn}-{tag}", cwd=str(tmp_path), sessionId=sid)
        assert result["status"] == "completed" and result["text"] == f"ECHO:{turn}-{tag}"
        assert messages[0]["type"] == "session.resumed"
        assert await live_pids(bridge, sid) == [pid], "the same app-server serves every turn"
    body = bodies_of(scripted_model, "echo")[-1]
    assert times_seen(body, tag, "one", "two", "three") == [1, 1, 1], "the model saw every turn once"


async def test_a_tool_call_is_streamed_and_closed(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await run(bridge, "tool", prompt="run it", cwd=str(tmp_path))
    assert result["status"] == "completed"
    [call] = [m["content"] for m in messages if m["type"] == "tool.call"]
    assert "echo hi" in call["arguments"]["command"]
    [done] = [m["content"] for m in messages if m["type"] == "tool.completed"]
    assert done["toolCallId"] == call["toolCallId"] and done["output"] == "hi\n"
    kinds = [m["type"] for m in messages]
    assert kinds.index("tool.call") < kinds.index("tool.completed") < len(kinds) - 1
    assert "hi" in result["text"]


async def test_a_cancel_mid_command_leaves_nothing_in_proc(bridge: LanguageClient, tmp_path: Path) -> None:
    duration = f"30.{secrets.randbelow(10**6):06d}"
    run_id = f"codex-cancel-{secrets.token_hex(3)}"
    task = asyncio.ensure_future(
        request(
            bridge,
            "pi/run",
            {"prompt": f"sleep {duration}", "model": "shell", "cwd": str(tmp_path), "runId": run_id},
        )
    )
    await messages_of(bridge).wait_type(run_id, "tool.call", timeout=WAIT * 2)
    sleeper = await wait_for_run_process(f"sleep {duration}")
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await task
    assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    receipt = answer["shutdown"]
    assert receipt["survivors"] == []
    assert sleeper.pid in receipt["pids"]
    # the sleep among them: dead (a zombie the bridge adopted is reaped off the answer's path)
    assert run_processes_alive(receipt["pids"]) == []
    messages = messages_of(bridge).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    await assert_no_run_processes(client=bridge)


async def test_codex_killed_mid_turn_fails_clearly_and_the_conversation_goes_on(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    first, _ = await run(bridge, "echo", prompt="first", cwd=str(tmp_path))
    sid = first["sessionId"]
    run_id = f"codex-killed-{secrets.token_hex(3)}"
    task = asyncio.ensure_future(
        request(
            bridge,
            "pi/run",
            {
                "prompt": "go",
                "model": "slow",
                "cwd": str(tmp_path),
                "sessionId": sid,
                "runId": run_id,
                "retry": {"maxAttempts": 1},
            },
        )
    )
    await messages_of(bridge).wait_type(run_id, "assistant", timeout=WAIT * 2)  # mid-turn: streaming
    [pid] = await live_pids(bridge, sid)
    codex = psutil.Process(pid)
    codex.kill()
    try:
        result = await asyncio.wait_for(task, WAIT * 2)
    except Exception as exc:  # a failed run is answered as an error whose data is the result
        result = exc.data  # type: ignore[attr-defined]
    assert result["status"] == "failed"
    messages = messages_of(bridge).by_run[run_id]
    assert messages[-1]["type"] == "terminal.failed"
    assert "Codex" in messages[-1]["content"]["error"]["message"]
    after, _ = await run(bridge, "echo", prompt="after", cwd=str(tmp_path), sessionId=sid)
    assert after["status"] == "completed" and after["text"] == "ECHO:after"


async def test_a_retried_prompt_is_seen_once_by_the_model(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    first, _ = await run(bridge, "echo", prompt=f"before-{tag}", cwd=str(tmp_path))
    sid = first["sessionId"]
    scripted_model.reset()  # re-arms flaky: two failures, then an answer
    result, _ = await run(
        bridge, "flaky", prompt=f"retried-{tag}", cwd=str(tmp_path), sessionId=sid, retry=RETRY_THREE
    )
    assert (result["status"], result["attempts"]) == ("completed", 3)
    assert result["sessionId"] == sid, "every attempt on the conversation's thread"
    seen = [times_seen(body, tag, "before", "retried") for body in bodies_of(scripted_model, "flaky")]
    assert seen == [[1, 1]] * 3, "one request per attempt: the earlier turn and the prompt, once each"
    after, _ = await run(bridge, "echo", prompt=f"after-{tag}", cwd=str(tmp_path), sessionId=sid)
    [body] = bodies_of(scripted_model, "echo")
    assert times_seen(body, tag, "before", "retried", "after") == [1, 1, 1]


# ------------------------------------------------------------------ chosen per run


@pytest_lsp.fixture(
    config=BridgeServerConfig(
        server_command=[*BRIDGE], client_factory=make_client, extra_env=CONFIG.extra_env
    )
)
async def pi_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    """A bridge whose own agent is pi, its runs naming Codex; no pre-spawned spare, so every
    app-server in /proc is a conversation's."""
    home = tmp_path_factory.mktemp("codex-home")
    env = codex_env(home, f"http://127.0.0.1:{scripted_model.port}")
    await initialize(lsp_client, {"env": env, "silenceTimeoutMs": 60000, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def app_servers() -> list[int]:
    """This test's `codex app-server` processes, from /proc."""
    found = []
    for proc in run_processes():
        try:
            if "app-server" in proc.cmdline():
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def test_codex_named_by_the_runs_of_a_pi_bridge_is_live_per_conversation(
    pi_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    first, _ = await run(pi_bridge, "echo", prompt=f"one-{tag}", cwd=str(tmp_path), agent="codex")
    assert first["status"] == "completed" and first["text"] == f"ECHO:one-{tag}"
    sid = first["sessionId"]
    [pid] = app_servers()
    assert await live_pids(pi_bridge, sid) == [pid], "the conversation is live"
    for turn in ("two", "three"):
        result, _ = await run(
            pi_bridge, "echo", prompt=f"{turn}-{tag}", cwd=str(tmp_path), sessionId=sid, agent="codex"
        )
        assert result["status"] == "completed" and result["text"] == f"ECHO:{turn}-{tag}"
        assert app_servers() == [pid], "one app-server serves every turn"
    body = bodies_of(scripted_model, "echo")[-1]
    assert times_seen(body, tag, "one", "two", "three") == [1, 1, 1], "the model saw every turn once"
