"""The one leak search: processes of a run (tagged with the test's leak tag and a run token) that
are still alive; zombies count as dead.

It reads /proc: there is no event to wait on for another process's exit, so the waits here poll
with a timeout.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import psutil
from pytest_lsp import LanguageClient

from bridge.process.spawn import RUN_TOKEN_ENV
from tests.support.env import BRIDGE_MARKER_ENV, TEST_TAG_ENV, WAIT, current_test_tag, session_tag
from tests.support.lsp import request

if TYPE_CHECKING:
    from tests.support.raw import RawBridge


def run_processes(
    tag: str | None = None, marker: str | None = None, *, orphans_only: bool = False
) -> list[psutil.Process]:
    """Live (non-zombie) processes of runs started under `tag` (default: the current test's, and
    the session's), of the RawBridge with `marker` only when given. Bridges carry the tag too; a
    run's processes also carry a run token. With `orphans_only`, processes under a live bridge
    (which is a subreaper, so its runs' orphans stay under it) are left out: they are its business
    until it stops (a module-scoped bridge outlives a test)."""
    tags = [tag] if tag else [current_test_tag(), session_tag()]
    tag_needles = [f"{TEST_TAG_ENV}={value}".encode() for value in tags]
    needles = [f"{RUN_TOKEN_ENV}=".encode()]
    if marker is not None:
        needles.append(f"{BRIDGE_MARKER_ENV}={marker}".encode())
    found = []
    for pid in psutil.pids():
        try:
            environ = _environ(pid)
            if not any(n in environ for n in tag_needles) or not all(n in environ for n in needles):
                continue
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE or (orphans_only and _under_a_bridge(proc)):
                continue
            found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def _under_a_bridge(proc: psutil.Process) -> bool:
    """Whether a live bridge under test (tagged, without a run token) is an ancestor of `proc`."""
    for parent in proc.parents():
        try:
            environ = _environ(parent.pid)
        except OSError:
            continue
        if f"{TEST_TAG_ENV}=".encode() in environ and f"{RUN_TOKEN_ENV}=".encode() not in environ:
            return True
    return False


def agents_under(bridge_pid: int) -> set[int]:
    """The live agents a bridge started (its children that carry a run token): not the bridge's
    own short helpers, such as a checkpoint's git, which may come and go at any moment."""
    runs = {proc.pid for proc in run_processes()}
    return {child.pid for child in psutil.Process(bridge_pid).children() if child.pid in runs}


def tagged_processes() -> list[psutil.Process]:
    """Live processes of runs started under the current test's tag (or the session's)."""
    return run_processes()


def run_processes_alive(pids: list[int]) -> list[int]:
    """Which of these pids are alive and not zombies."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


async def warm_pids(client: LanguageClient) -> set[int]:
    """The bridge's idle warm-pool agents and live conversations' pis, with their descendants:
    alive on purpose, not of any run."""
    pids: set[int] = set()
    runs = await request(client, "pi/runs", None)
    for pid in [*runs["warmPids"], *(entry["pid"] for entry in runs.get("live", []))]:
        try:
            pids |= {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            continue
    return pids


def _leak_failure(left: list[psutil.Process], where: str) -> AssertionError:
    """Kill what is left (by pid, so it cannot leak into later tests) and describe it."""
    described = []
    for proc in left:
        try:
            described.append((proc.pid, " ".join(proc.cmdline())[:80]))
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(left, timeout=5)
    return AssertionError(f"processes of a run are still alive {where}: {described}")


def no_run_processes(
    bridge: RawBridge | None = None, timeout: float = 10.0, *, orphans_only: bool = False, where: str = ""
) -> None:
    """Fail if a process of a run (of `bridge`, else of every bridge of the current test) is alive
    after `timeout`; what is left is killed. `orphans_only`: see `run_processes`. Polls /proc:
    there is no event to wait on for another process's exit."""
    marker = bridge.marker if bridge is not None else None
    deadline = time.monotonic() + timeout
    while left := run_processes(marker=marker, orphans_only=orphans_only):
        if time.monotonic() > deadline:
            raise _leak_failure(left, where or (f"after bridge {bridge.pid}" if bridge else "after the test"))
        time.sleep(0.05)


async def assert_no_run_processes(timeout: float = 10.0, client: LanguageClient | None = None) -> None:
    """Fail if any process of a run of this test outlives it (polls /proc until the timeout).

    With `client`, that bridge's idle warm-pool agents are not counted (they belong to no run).
    """
    deadline = time.monotonic() + timeout
    while True:
        spare = await warm_pids(client) if client is not None else set()
        left = [proc for proc in run_processes() if proc.pid not in spare]
        if not left:
            return
        if time.monotonic() > deadline:
            raise _leak_failure(left, "")
        await asyncio.sleep(0.05)


async def wait_for_run_process(fragment: str, timeout: float = WAIT) -> psutil.Process:
    """Wait until a process of a run whose command line contains `fragment` is alive."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in tagged_processes():
            try:
                if fragment in " ".join(proc.cmdline()):
                    return proc
            except psutil.Error:
                continue
        if time.monotonic() > deadline:
            raise AssertionError(f"no run process matching {fragment!r} within {timeout} s")
        await asyncio.sleep(0.02)
