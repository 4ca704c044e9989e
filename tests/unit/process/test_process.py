"""bridge/process/ spawn and shutdown on real processes: stop_descendants, pid reuse, a stuck scan.

These drive the modules in-process (no bridge) because what they check is inside it: which pids a
scan walks from, and whether the event loop keeps running while a scan is slow. Each test runs in
both containment modes where the mode matters; cgroup mode is skipped where cgroups are not
writable unless PI_BRIDGE_REQUIRE_CGROUP=1.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from bridge.process import containment, shutdown, spawn
from tests.support.env import skip_without_cgroup

MODES = ["cgroup", "cgroup-v1", "tree"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Pin the containment mode for spawns made in this test ("cgroup-v1": the v1 freezer path)."""
    chosen: str = request.param
    if chosen.startswith("cgroup"):
        found = containment.hierarchy()
        if chosen == "cgroup-v1":
            v1 = [h for h in containment._candidates() if h.flavor == "v1" and containment._works(h)]
            if not v1:
                skip_without_cgroup("no writable cgroup v1 freezer here")
            found = v1[0]
        if found is None:
            skip_without_cgroup("no writable cgroup hierarchy here")
        monkeypatch.setattr(containment, "_chosen", [found])
    else:
        monkeypatch.setattr(containment, "_chosen", [None])
    yield chosen.split("-", maxsplit=1)[0]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def children_of(pid: int, count: int, timeout: float = 10.0, *, running: str | None = None) -> list[int]:
    """Wait until `pid` has `count` live children (each running the program `running`, when
    given: a child between its fork and its exec still runs its parent's); their pids."""
    deadline = time.monotonic() + timeout
    while True:
        kids = [p.pid for p in psutil.Process(pid).children() if alive(p.pid)]
        if len(kids) >= count and (running is None or all(_runs(kid, running) for kid in kids)):
            return kids
        assert time.monotonic() < deadline, f"pid {pid} never had {count} children"
        time.sleep(0.01)


def _runs(pid: int, program: str) -> bool:
    with contextlib.suppress(psutil.Error, IndexError):
        return os.path.basename(psutil.Process(pid).cmdline()[0]) == program
    return False


def kill_quietly(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


async def test_stop_descendants_kills_everything_but_the_agent(mode: str, tmp_path: Any) -> None:
    child = await spawn.spawn(("sh", "-c", "sleep 300 & sleep 300 & read line"), str(tmp_path), {})
    kids = children_of(child.pid, 2)
    try:
        receipt = await shutdown.stop_descendants(child)
        assert receipt.containment == mode
        assert receipt.stage == "killed"
        assert set(kids) <= set(receipt.pids) and child.pid not in receipt.pids
        assert receipt.survivors == []
        assert not any(alive(pid) for pid in kids)
        assert child.returncode is None and alive(child.pid), "the agent itself must be spared"
        again = await shutdown.stop_descendants(child)
        assert again.stage == "exited" and again.pids == [] and again.survivors == []
    finally:
        final = await shutdown.shutdown_tree(child)
        spawn.forget(child)
        await child.process.aclose()  # its pipes, before the test's loop closes
        kill_quietly(kids)
    assert final.survivors == []


async def test_stop_descendants_keeps_what_it_is_told_to_keep_while_it_kills(
    mode: str, tmp_path: Any
) -> None:
    """A sweep that kills the run's processes spares the agent's own helpers (`keep`), in every
    mode: a cgroup-wide kill took them too (Claude Code under claude-agent-acp, once)."""
    child = await spawn.spawn(("sh", "-c", "sleep 301 & sleep 302 & read line"), str(tmp_path), {})
    kids = children_of(child.pid, 2, running="sleep")
    helper = next(pid for pid in kids if psutil.Process(pid).cmdline()[-1] == "301")
    (runs,) = set(kids) - {helper}
    try:
        keep = {pid: start for pid, start in shutdown.helpers_now(child).items() if pid == helper}
        assert list(keep) == [helper]
        receipt = await shutdown.stop_descendants(child, keep=keep)
        assert receipt.stage == "killed"
        assert receipt.pids == [runs] and receipt.survivors == []
        assert not alive(runs)
        assert alive(helper), "the kept helper was killed with the run's process"
        assert alive(child.pid)
    finally:
        final = await shutdown.shutdown_tree(child)
        spawn.forget(child)
        await child.process.aclose()
        kill_quietly(kids)
    assert final.survivors == []


async def test_agent_reaped_and_its_pid_reused_is_never_walked_from_nor_killed(
    mode: str, tmp_path: Any
) -> None:
    agent = await spawn.spawn(("sleep", "0.3"), str(tmp_path), {})
    assert await shutdown.wait_exit(agent, 10)
    # Stand-in for a reused pid: an unrelated process (with a child) now answers to the agent's pid.
    stranger = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    grandchild = children_of(stranger.pid, 1)

    @dataclasses.dataclass
    class Reaped:
        pid: int
        returncode: int | None = 0

        def send_signal(self, signum: int) -> None:
            raise AssertionError("a reaped agent must not be signalled")

    reused = dataclasses.replace(agent, process=Reaped(stranger.pid))
    try:
        receipt = await shutdown.shutdown_tree(reused)
        assert alive(stranger.pid) and all(alive(pid) for pid in grandchild), (
            f"the stranger holding the reused pid was killed: {receipt}"
        )
        assert stranger.pid not in receipt.pids
        assert agent.handle is not None and agent.handle.pid == agent.pid, "identity is taken at spawn"
    finally:
        spawn.forget(agent)
        await agent.process.aclose()  # its pipes, before the test's loop closes
        kill_quietly([stranger.pid, *grandchild])
        stranger.wait(5)


async def test_event_loop_keeps_running_while_a_scan_is_stuck_reading_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A process in D state blocks the read of its /proc/<pid>/environ: simulated, 1 s per read."""
    monkeypatch.setattr(containment, "_chosen", [None])  # tree mode: the one that reads environ
    child = await spawn.spawn(("sh", "-c", "sleep 300; :"), str(tmp_path), {})
    (stuck,) = children_of(child.pid, 1)
    real_open = builtins.open

    def slow_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == f"/proc/{stuck}/environ":
            time.sleep(1.0)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", slow_open)
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        receipt = await asyncio.wait_for(shutdown.shutdown_tree(child), 60)
    finally:
        done.set()
        await ticker
        monkeypatch.setattr(builtins, "open", real_open)
        spawn.forget(child)
        await child.process.aclose()  # its pipes, before the test's loop closes
        kill_quietly([stuck])
    assert receipt.survivors == [] and not alive(stuck)
    assert stuck in receipt.pids
    assert max(gaps) < 0.5, f"the event loop stalled {max(gaps):.2f} s while a scan read a stuck environ"


async def test_stop_right_after_spawn_stops_the_agent_and_removes_its_cgroup(
    mode: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-pool pre-spawn stopped at shutdown: the agent may not have entered its cgroup yet.

    A loaded machine is simulated by a shim that waits 0.3 s before it enters the cgroup.
    """
    monkeypatch.setattr(containment, "_SHIM_SCRIPT", "sleep 0.3; " + containment._SHIM_SCRIPT)
    leftovers: list[int] = []
    for _ in range(3):
        child = await spawn.spawn(("sleep", "300"), str(tmp_path), {})
        receipt = await shutdown.shutdown_tree(child)
        if alive(child.pid):
            leftovers.append(child.pid)
        assert child.pid in receipt.pids, f"the agent was not found right after its spawn: {receipt}"
        assert receipt.survivors == []
        spawn.forget(child)
        await child.process.aclose()  # its pipes, before the test's loop closes
        if child.cgroup is not None:
            deadline = time.monotonic() + 5
            while child.cgroup.dirs[0].exists():
                spawn.reap_orphans()  # retries the removal put off while the agent was dying
                assert time.monotonic() < deadline, f"the run's cgroup was left behind: {child.cgroup.dirs}"
                await asyncio.sleep(0.01)
    kill_quietly(leftovers)
    assert leftovers == []


@pytest.mark.parametrize("mode", ["cgroup", "cgroup-v1"], indirect=True)
async def test_cgroup_catches_a_grandchild_that_clears_its_env_and_double_forks(
    mode: str, tmp_path: Any
) -> None:
    """Both cgroup flavors (v2 cgroup.kill, v1 freeze-kill-thaw). Tree mode needs the bridge's
    subreaper (this test runner is none): tests/e2e/test_containment.py covers it."""
    pidfile = tmp_path / "escaped.pid"
    inner = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 300"
    child = await spawn.spawn(
        ("sh", "-c", f"(env -i setsid sh -c '{inner}' &); read line"), str(tmp_path), {}
    )
    deadline = time.monotonic() + 10
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the escape never ran"
        await asyncio.sleep(0.01)
    escaped = int(pidfile.read_text())
    try:
        receipt = await shutdown.shutdown_tree(child)
        assert receipt.containment == "cgroup"
        assert escaped in receipt.pids and receipt.survivors == []
        assert not alive(escaped)
    finally:
        spawn.forget(child)
        await child.process.aclose()
        kill_quietly([escaped])


async def test_has_exited_tells_a_killed_agent_before_its_exit_is_collected(tmp_path: Any) -> None:
    """A conversation's agent killed a moment ago is not alive, though the loop has not reaped it."""
    child = await spawn.spawn(("sleep", "300"), str(tmp_path), {})
    try:
        assert child.has_exited() is False
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        # Blocking sleeps: the loop does not run, so it cannot collect the exit meanwhile.
        while not child.has_exited():
            assert time.monotonic() < deadline, "a killed process never showed as exited"
            time.sleep(0.01)  # polling: the test checks the poll itself
        assert child.returncode is None, "told from the pidfd, not from the collected exit"
    finally:
        await shutdown.shutdown_tree(child)
        spawn.forget(child)
        await child.process.aclose()


async def test_a_tool_s_copy_of_an_mcp_server_s_command_line_is_not_kept_by_the_sweep(
    mode: str, tmp_path: Any
) -> None:
    """The sweep after a run keeps the conversation's MCP servers that the adapter's agent started,
    found by their command line: one process per server, the first started. A later process with
    the same command line (a tool's, made to pass for the server) is the run's."""
    child = await spawn.spawn(
        ("sh", "-c", "sh -c 'sleep 1001 & sleep 1002 & sleep 1001 & read line'"), str(tmp_path), {}
    )
    (agent,) = children_of(child.pid, 1)
    servers = sorted(children_of(agent, 3, running="sleep"))
    try:
        under = shutdown.children_now(child)
        assert set(under) == {agent}
        kept = shutdown.started_as_now(child, [("sleep", "1001"), ("/bin/sleep", "1002")], under)
        first, second, copy = servers  # started in this order by one shell: rising pids
        assert set(kept) == {first, second}, f"kept {sorted(kept)} of {servers}"
        assert copy not in kept
    finally:
        await shutdown.shutdown_tree(child)
        spawn.forget(child)
        await child.process.aclose()
        kill_quietly(servers)
