"""Tree containment's search for a run's processes: which children of the bridge it claims.

The test process plays the bridge: what it forks is, to the search, a child of the bridge.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast

from bridge.process import shutdown, spawn
from bridge.process.procfs import all_stats, now_ticks, read_stat


def _agent() -> Any:
    """An agent of a run that started just now (already reaped: only its holders count)."""
    return SimpleNamespace(pid=-1, returncode=0, start_ticks=now_ticks(), token=uuid.uuid4().hex)


def _roots(agent: Any) -> list[int]:
    return shutdown._tree_roots(cast(spawn.ChildProcess, agent), all_stats())


@contextmanager
def _forked_before_its_exec() -> Iterator[int]:
    """A child of this process that has forked and not exec'd: it still has our environment."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only waits to be let go
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        yield pid
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


@contextmanager
def _child_with(environment: dict[str, str]) -> Iterator[int]:
    """A child of this process that exec'd with exactly `environment`, waiting on its stdin."""
    child = subprocess.Popen(
        [sys.executable, "-S", "-c", "import sys; print(flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # exec'd: its environ is the one given
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_fork_of_ours_before_its_exec_is_a_spawn_under_way_not_an_escaped_orphan() -> None:
    agent = _agent()
    under_way = uuid.uuid4().hex
    spawn._spawning[under_way] = agent.start_ticks
    try:
        with _forked_before_its_exec() as pid:
            assert read_stat(pid) is not None
            assert pid not in _roots(agent), "another spawn being made was claimed by this run"
    finally:
        spawn._spawning.pop(under_way)


def test_a_child_with_our_environment_while_no_spawn_is_under_way_is_an_escaped_orphan() -> None:
    agent = _agent()
    with _forked_before_its_exec() as pid:
        assert pid in _roots(agent), "a process posing as a spawn under way escaped the search"


def test_a_made_up_run_token_claims_nothing_and_a_live_one_does() -> None:
    agent = _agent()
    made_up = {"PATH": os.environ.get("PATH", ""), spawn.RUN_TOKEN_ENV: uuid.uuid4().hex}
    with _child_with(made_up) as pid:
        assert pid in _roots(agent), "a made-up token passed for another run's"
    other = uuid.uuid4().hex
    spawn._live_tokens.add(other)
    try:
        with _child_with({**made_up, spawn.RUN_TOKEN_ENV: other}) as pid:
            assert pid not in _roots(agent), "another live spawn's process was claimed by this run"
    finally:
        spawn._live_tokens.discard(other)


def test_a_child_holding_the_run_s_own_token_is_the_run_s() -> None:
    agent = _agent()
    with _child_with({"PATH": os.environ.get("PATH", ""), spawn.RUN_TOKEN_ENV: agent.token}) as pid:
        assert pid in _roots(agent)
