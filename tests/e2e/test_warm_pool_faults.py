"""The warm pool's faults, seen from the wire (pi/runs warmPids, processes, what agents receive):
these hold for any design of the pool, not only today's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.conftest import BRIDGE
from tests.support.env import EXEC_BRIDGE, bridge_env, bridge_pid, fake_pi_command
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import (
    answer_or_error,
    bridge_config,
    initialize,
    make_client,
    messages_of,
    request,
    start_request,
)

FAKE_SESSION = "01fa4e00-0000-7000-8000-000000000001"  # the fake pi's session id, every run


def the_bridge() -> psutil.Process:
    """The bridge under test: the one this test process started (by exec or through the fork
    server's launcher)."""
    launched = [p for p in psutil.Process().children() if p.cmdline()[-2:] in (BRIDGE[-2:], EXEC_BRIDGE[-2:])]
    assert len(launched) == 1, launched
    return psutil.Process(bridge_pid(launched[0].pid))


async def warm_agents(client: LanguageClient, count: int, timeout: float = 20) -> list[psutil.Process]:
    """Wait until the pool holds `count` idle agents; return them."""
    deadline = time.monotonic() + timeout
    while True:
        pids = (await request(client, "pi/runs", None))["warmPids"]
        if len(pids) >= count:
            return [psutil.Process(pid) for pid in pids]
        assert time.monotonic() < deadline, f"{count} warm agents not ready within {timeout} s (have {pids})"
        await asyncio.sleep(0.05)


@pytest_lsp.fixture(config=bridge_config(by_exec=True))
async def exec_fake_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """conftest's fake_bridge, started by exec: its memory is measured."""
    await initialize(lsp_client, {"piCommand": fake_pi_command(), "silenceTimeoutMs": 20000})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_warm_agents_do_not_keep_the_last_prompt(
    exec_fake_bridge: LanguageClient, tmp_path: Path
) -> None:
    """After a 50 MB prompt, the pool's two idle agents (same launch, and the follow-up of its
    session) must not hold the prompt's bytes in the bridge for their TTL."""
    fake_bridge = exec_fake_bridge
    bridge = the_bridge()
    before = bridge.memory_info().rss
    prompt = "fifty megabytes " * (50 * 1024 * 1024 // 16)
    result = await request(fake_bridge, "pi/run", {"prompt": prompt, "model": "text", "cwd": str(tmp_path)})
    assert result["status"] == "completed"
    del prompt
    await warm_agents(fake_bridge, 2)
    held = bridge.memory_info().rss - before
    assert held < 40 * 1024 * 1024, f"the bridge holds {held / 2**20:.0f} MB more with two idle agents"


async def test_a_launch_that_cannot_be_spawned_fails_the_run_and_the_bridge_lives_on(
    fake_bridge: LanguageClient, tmp_path: Path
) -> None:
    """A NUL byte in the model name cannot go into an argv: a clear spawn error for the run, and
    the pool's pre-spawn of the same launch must not take the bridge down."""
    bad = await request(fake_bridge, "pi/run", {"prompt": "x", "model": "te\u0000xt", "cwd": str(tmp_path)})
    assert bad["status"] == "failed" and bad["error"]["kind"] == "spawn", bad["error"]
    good = await request(fake_bridge, "pi/run", {"prompt": "x", "model": "text", "cwd": str(tmp_path)})
    assert good["status"] == "completed"


async def test_nothing_is_primed_after_a_cancelled_run(fake_bridge: LanguageClient, tmp_path: Path) -> None:
    cancelled_cwd, other_cwd = tmp_path / "cancelled", tmp_path / "other"
    cancelled_cwd.mkdir()
    other_cwd.mkdir()
    _, task = start_request(
        fake_bridge,
        "pi/run",
        {"runId": "to-cancel", "prompt": "x", "model": "slow", "cwd": str(cancelled_cwd)},
    )
    await messages_of(fake_bridge).wait_type("to-cancel", "assistant")
    await request(fake_bridge, "pi/cancel", {"runId": "to-cancel"})
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled"
    # A later run's pre-spawn is the event to wait on; one for the cancelled run would be older.
    done = await request(fake_bridge, "pi/run", {"prompt": "x", "model": "text", "cwd": str(other_cwd)})
    assert done["status"] == "completed"
    warm = await warm_agents(fake_bridge, 1)
    assert str(cancelled_cwd) not in [agent.cwd() for agent in warm], "primed after a cancelled run"


async def test_no_warm_copy_of_a_session_while_another_run_of_it_is_live(
    fake_bridge: LanguageClient, tmp_path: Path
) -> None:
    """Two runs share a session: the one that ends first must not leave an agent that opened the
    session while the other still writes it (the next turn would get a stale copy)."""
    session = {"sessionId": FAKE_SESSION, "cwd": str(tmp_path)}
    _, long_task = start_request(
        fake_bridge, "pi/run", {"runId": "long", "prompt": "x", "model": "slow", **session}
    )
    await messages_of(fake_bridge).wait_type("long", "assistant")
    short = await request(
        fake_bridge, "pi/run", {"runId": "short", "prompt": "x", "model": "text", **session}
    )
    assert short["status"] == "completed"
    # A later run's pre-spawn is the event to wait on; one for the session would be older.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = await request(fake_bridge, "pi/run", {"prompt": "x", "model": "echo", "cwd": str(elsewhere)})
    assert done["status"] == "completed"
    warm = await warm_agents(fake_bridge, 1)
    stale = [agent.pid for agent in warm if FAKE_SESSION in agent.cmdline()]
    assert stale == [], "an agent opened the session while another run of it was live"
    await request(fake_bridge, "pi/cancel", {"runId": "long"})
    await answer_or_error(long_task)
    await assert_no_run_processes(client=fake_bridge)


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def bridge_to_shut_down(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """A fake-pi bridge the test itself shuts down (a second `shutdown` is never answered)."""
    await initialize(lsp_client, {"piCommand": fake_pi_command()})
    yield lsp_client
    lsp_client.exit(None)
    await assert_no_run_processes()


async def test_shutdown_while_agents_are_being_pre_spawned_leaves_none_behind(
    bridge_to_shut_down: LanguageClient, tmp_path: Path
) -> None:
    """Idle agents slow to stop keep the pool's close busy for seconds; pre-spawns that come due
    meanwhile (a run's immediate one, its session follow-up 3 s later) must not outlive it."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    client = bridge_to_shut_down
    done = await request(client, "pi/run", {"prompt": "x", "model": "linger", "cwd": str(first)})
    assert done["status"] == "completed"
    await warm_agents(client, 2)
    done = await request(client, "pi/run", {"prompt": "x", "model": "linger", "cwd": str(second)})
    assert done["status"] == "completed"
    await request(client, "shutdown", None)  # answered once every run and idle agent is stopped
    await assert_no_run_processes(timeout=10)
