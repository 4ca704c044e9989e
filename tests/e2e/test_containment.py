"""Containment: nothing a run started outlives it, in both modes, and the receipt says which mode.

Every test runs twice: with the run in its own cgroup (`PI_BRIDGE_CONTAINMENT=cgroup`) and with
the tree search (`PI_BRIDGE_CONTAINMENT=tree`). The cgroup mode needs a writable cgroup hierarchy
(root on the CI machines); elsewhere it is skipped unless PI_BRIDGE_REQUIRE_CGROUP=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pytest_lsp import ClientServerConfig, LanguageClient

from bridge.process import containment
from tests.conftest import BRIDGE, requires_pi
from tests.support import env
from tests.support.env import bridge_env, fake_pi_command
from tests.support.leaks import assert_no_run_processes, run_processes_alive
from tests.support.lsp import initialize, make_client, messages_of, request, start_request

MODES = ["cgroup", "tree"]


def cgroup_writable() -> bool:
    """Whether this machine lets the bridge make cgroups (the probe the bridge itself runs)."""
    return containment.hierarchy() is not None


def skip_without_cgroup(mode: str) -> None:
    if mode == "cgroup" and not cgroup_writable():
        env.skip_without_cgroup("no writable cgroup hierarchy here")


async def start_bridge(mode: str, options: dict[str, object]) -> LanguageClient:
    config = ClientServerConfig(
        server_command=BRIDGE,
        client_factory=make_client,
        server_env=bridge_env({"PI_BRIDGE_CONTAINMENT": mode}),
    )
    client = await config.start()
    await initialize(client, options)
    return client


@pytest.fixture(params=MODES)
async def fake_bridge_in(request: pytest.FixtureRequest) -> AsyncIterator[tuple[LanguageClient, str]]:
    """A fake-pi bridge in each containment mode."""
    mode: str = request.param
    skip_without_cgroup(mode)
    client = await start_bridge(mode, {"piCommand": fake_pi_command(), "silenceTimeoutMs": 20000})
    yield client, mode
    await client.shutdown_session()
    await client.stop()
    await assert_no_run_processes()


@pytest.fixture(params=MODES)
async def real_bridge_in(
    request: pytest.FixtureRequest, pi_agent_dir: Path
) -> AsyncIterator[tuple[LanguageClient, str]]:
    """A real-pi bridge (scripted model) in each containment mode."""
    mode: str = request.param
    skip_without_cgroup(mode)
    client = await start_bridge(mode, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}})
    yield client, mode
    await client.shutdown_session()
    await client.stop()
    await assert_no_run_processes()


def alive(pid: int) -> bool:
    return run_processes_alive([pid]) != []


async def read_pid(path: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.02)
    return int(path.read_text())


def kill_quietly(pid: int | None) -> None:
    """Clean up after a failing run of the test (the old code left the process alive)."""
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("escape", ["escape_tool", "escape_with_a_made_up_token"])
async def test_grandchild_that_clears_its_env_and_double_forks_dies_with_the_cancel(
    fake_bridge_in: tuple[LanguageClient, str], tmp_path: Path, escape: str
) -> None:
    client, mode = fake_bridge_in
    pidfile = tmp_path / "escaped.pid"
    escaped: int | None = None
    try:
        _, task = start_request(client, "pi/run", {"runId": "esc", "prompt": str(pidfile), "model": escape})
        await messages_of(client).wait_until(
            lambda: any(
                m["type"] == "tool.update" and "escaped" in str(m["content"])
                for m in messages_of(client).by_run["esc"]
            )
        )
        escaped = await read_pid(pidfile)
        assert alive(escaped)
        answer = await request(client, "pi/cancel", {"runId": "esc"})
        receipt = answer["shutdown"]
        print(f"CONTAIN escape mode={mode} escaped={escaped} alive_after={alive(escaped)} receipt={receipt}")
        assert receipt["survivors"] == []
        assert not alive(escaped), (
            f"the receipt said no survivors, yet the escaped {escaped} lives: {receipt}"
        )
        assert escaped in receipt["pids"], f"the escaped sleep {escaped} was not found: {receipt}"
        assert receipt["containment"] == mode
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
    finally:
        kill_quietly(escaped)


@requires_pi
@pytest.mark.realpi
async def test_real_pi_bash_tool_escape_dies_with_the_run(
    real_bridge_in: tuple[LanguageClient, str], tmp_path: Path
) -> None:
    """Real pi's bash tool runs the escape; the run completes and the sweep must catch it."""
    client, mode = real_bridge_in
    pidfile = tmp_path / "escaped.pid"  # written by the tool's command, in the run's cwd
    escaped: int | None = None
    try:
        result = await asyncio.wait_for(
            request(
                client,
                "pi/run",
                {"prompt": "go", "provider": "fake", "model": "toolescape", "cwd": str(tmp_path)},
            ),
            60,
        )
        assert result["status"] == "completed", repr(result)[:3000]
        escaped = await read_pid(pidfile)
        print(f"CONTAIN real-pi escape mode={mode} escaped={escaped} alive_after={alive(escaped)}")
        assert not alive(escaped), f"the escaped sleep {escaped} outlived the run ({mode})"
    finally:
        kill_quietly(escaped)


async def test_agent_that_exits_while_a_helper_keeps_stdout_open_answers_and_the_helper_dies(
    fake_bridge_in: tuple[LanguageClient, str], tmp_path: Path
) -> None:
    client, mode = fake_bridge_in
    pidfile = tmp_path / "helper.pid"
    helper: int | None = None
    try:
        run = request(client, "pi/run", {"prompt": str(pidfile), "model": "helper_keeps_stdout"})
        sent = time.monotonic()
        try:
            result = await asyncio.wait_for(run, 15)
        except TimeoutError:
            pytest.fail("the run never answered: its exit was only seen through its pipes")
        helper = await read_pid(pidfile)
        print(
            f"CONTAIN hang mode={mode} answered_after_s={time.monotonic() - sent:.2f} helper_alive={alive(helper)}"
        )
        assert result["status"] == "completed", repr(result)[:3000]
        assert result["text"] == "Done, but my helper lingers."
        assert not alive(helper), "the helper holding stdout outlived the run"
    finally:
        kill_quietly(helper)
