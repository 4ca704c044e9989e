"""The json engine's warm pool: a pre-spawned pi with the next run's exact launch; same messages as cold."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psutil
import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.conftest import BRIDGE, requires_pi
from tests.support.env import bridge_env
from tests.support.leaks import assert_no_run_processes, run_processes_alive
from tests.support.lsp import answer_or_error, initialize, make_client, messages_of, request, start_request

pytestmark = [requires_pi, pytest.mark.realpi]


async def wait_warm(client: LanguageClient, count: int = 1, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        pids = (await request(client, "pi/runs", None))["warmPids"]
        if len(pids) >= count:
            return list(pids)
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} warm agents not ready within {timeout} s (have {pids})")
        await asyncio.sleep(0.05)


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """A run's messages without what differs between any two runs by nature: ids, usage, where
    the text was split into deltas, and how many cumulative tool.updates came before the last
    (both depend on pipe timing; the text and the final output do not)."""
    out: list[tuple[str, Any]] = []
    for message in messages:
        content = {
            k: v for k, v in message["content"].items() if k not in ("sessionId", "usage", "toolCallId")
        }
        if message["type"] == "assistant" and out and out[-1][0] == "assistant":
            out[-1] = ("assistant", {"text": out[-1][1]["text"] + content["text"]})
        elif message["type"] == "tool.update" and out and out[-1][0] == "tool.update":
            out[-1] = ("tool.update", content)  # cumulative: the last one holds all of it
        else:
            out.append((message["type"], content))
    return out


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def json_bridge(lsp_client: LanguageClient, pi_agent_dir) -> Any:
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "engine": "json"})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_warm_run_produces_the_same_messages_as_cold(json_bridge: LanguageClient, tmp_path) -> None:
    params = {"prompt": "Say hello", "provider": "fake", "model": "tool", "cwd": str(tmp_path)}
    cold = await request(json_bridge, "pi/run", {**params, "runId": "cold"})
    warm_before = await wait_warm(json_bridge, 2)
    warm = await request(json_bridge, "pi/run", {**params, "runId": "warm"})
    assert cold["text"] == warm["text"]
    by_run = messages_of(json_bridge).by_run
    assert shape(by_run["cold"]) == shape(by_run["warm"])
    assert by_run["cold"][0]["content"]["sessionId"] != by_run["warm"][0]["content"]["sessionId"]
    used = [
        pid for pid in warm_before if not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    ]
    assert used, "the second run took a warm agent"


async def test_next_turn_of_the_session_uses_a_warm_resume(json_bridge: LanguageClient, tmp_path) -> None:
    params = {"prompt": "Say hello", "provider": "fake", "model": "text", "cwd": str(tmp_path)}
    first = await request(json_bridge, "pi/run", params)
    warm = await wait_warm(json_bridge, 2)
    _, task = start_request(
        json_bridge, "pi/run", {**params, "sessionId": first["sessionId"], "runId": "turn2"}
    )
    # The run's pi, while it runs (the scripted model paces the answer over ~150 ms).
    await messages_of(json_bridge).wait_type("turn2", "session.resumed")
    live = {run["runId"]: run for run in (await request(json_bridge, "pi/runs", None))["runs"]}
    second, error = await answer_or_error(task)
    assert error is None, error
    assert second["sessionId"] == first["sessionId"]
    assert messages_of(json_bridge).by_run["turn2"][0]["type"] == "session.resumed"
    assert live["turn2"]["pid"] in warm, "the follow-up ran on the pi pre-spawned to resume its session"


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def short_ttl_bridge(lsp_client: LanguageClient, pi_agent_dir) -> Any:
    await initialize(
        lsp_client,
        {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPoolTtlMs": 1000, "engine": "json"},
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_entries_expire_and_are_stopped(short_ttl_bridge: LanguageClient, tmp_path) -> None:
    await request(
        short_ttl_bridge,
        "pi/run",
        {"prompt": "hi", "provider": "fake", "model": "text", "cwd": str(tmp_path)},
    )
    pids = await wait_warm(short_ttl_bridge, 1)
    deadline = time.monotonic() + 15
    while (await request(short_ttl_bridge, "pi/runs", None))["warmPids"]:
        assert time.monotonic() < deadline, "warm entries must expire"
        await asyncio.sleep(0.1)
    # Leaving the pool and being stopped are two steps (the stop takes pi's SIGTERM exit time).
    while run_processes_alive(list(pids)):
        assert time.monotonic() < deadline, "expired warm entries must be stopped"
        await asyncio.sleep(0.05)


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def cold_bridge(lsp_client: LanguageClient, pi_agent_dir) -> Any:
    await initialize(
        lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False, "engine": "json"}
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_pool_can_be_disabled(cold_bridge: LanguageClient, tmp_path) -> None:
    await request(
        cold_bridge, "pi/run", {"prompt": "hi", "provider": "fake", "model": "text", "cwd": str(tmp_path)}
    )
    runs = await request(cold_bridge, "pi/runs", None)
    assert runs["warmPids"] == [] and runs["warmRssBytes"] == 0
