"""Spawn an agent contained, and keep track of our spawns until their exit status is in."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import ChainMap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.abc
import anyio.to_thread
import psutil

from bridge.contract import Containment
from bridge.process import containment
from bridge.process.containment import RunCgroup
from bridge.process.procfs import now_ticks, own_children, read_stat
from bridge.process.stdin_pipe import StdinPipe

RUN_TOKEN_ENV: Final = "PI_BRIDGE_RUN_TOKEN"
_PR_SET_CHILD_SUBREAPER: Final = 36
TOKEN_PREFIX: Final = f"{RUN_TOKEN_ENV}=".encode()

_spawned_pids: set[int] = set()
#: How long the bridge's stop waits for a stray child to be gone, and how often it looks.
STRAY_WAIT_SECONDS: Final = 2.0
STRAY_POLL_SECONDS: Final = 0.01
# Start-time floors of spawns under way: their pid is a child of ours before `spawn` records it,
# and its exit status belongs to the loop's child watcher, not to `reap_orphans`.
_spawning: dict[str, int] = {}
# Tokens of the spawns alive or under way: a process holding one of these belongs to that spawn;
# a token that is not here (made up by an escaped process) makes no claim at all.
_live_tokens: set[str] = set()
_cgroups_to_remove: list[RunCgroup] = []


class SpawnError(Exception):
    """The agent could not be started (missing, not executable, bad cwd...)."""


def environ_with(env: Mapping[str, str]) -> Mapping[str, str]:
    """This process's environment with `env` over it, for reading: looked through, not copied
    (a reader asks for a name or two; a copy decodes the whole environment)."""
    return ChainMap(dict(env), os.environ)


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux), so orphaned descendants come back to it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        result: int = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return result == 0
    except (OSError, AttributeError):
        return False


def reap_orphans() -> list[int]:
    """Collect the exit status of zombie children we did not spawn ourselves (adopted orphans).

    Cheap enough for the event loop: it reads only our own children, not all of /proc. Our own
    spawns are left to the loop's child watcher, which waits on them by pid.
    """
    reaped: list[int] = []
    floor = min(_spawning.values(), default=None)
    for pid in own_children():
        if pid in _spawned_pids:
            continue
        stat = read_stat(pid)
        if stat is None or not stat.zombie or (floor is not None and stat.start >= floor):
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            continue
        if done:
            reaped.append(done)
    if _cgroups_to_remove:
        _remove_empty_cgroups()
    return reaped


@dataclass(slots=True)
class ChildProcess:
    """A started agent process with its run token, its identity and its containment."""

    process: anyio.abc.Process
    token: str
    argv: tuple[str, ...]
    stdin: StdinPipe
    # Taken once at spawn, while the pid is certainly ours (unreaped): never rebuilt from a pid.
    handle: psutil.Process | None = None
    start_ticks: int = 0
    pidfd: int | None = None
    cgroup: RunCgroup | None = None
    #: The environment it was started with, kept: /proc shows it only once the exec is done, and
    #: before that the parent's (a client reading it first thing read the launch's intent wrong).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The agent's exit code (negative: killed by that signal), or None while it runs."""
        return self.process.returncode

    def has_exited(self) -> bool | None:
        """Whether the process has ended, from its pidfd (one poll, no /proc read); None when
        there is no pidfd to ask."""
        if self.returncode is not None:
            return True
        if self.pidfd is None:
            return None
        readable, _, _ = select.select([self.pidfd], [], [], 0)
        return bool(readable)

    @property
    def containment(self) -> Containment:
        """How this agent's processes are found: its own cgroup, or the tree search."""
        return "cgroup" if self.cgroup is not None else "tree"


def _check_program(argv0: str, cwd: str, env: Mapping[str, str]) -> str:
    """The program the shim will exec, checked the way exec would fail (the shim cannot tell us)."""
    if not os.path.isdir(cwd):
        raise SpawnError(f"working directory {cwd!r} does not exist")
    if os.sep in argv0:
        path = os.path.join(cwd, argv0)
        if not os.path.exists(path):
            raise SpawnError(f"{argv0!r} was not found")
    else:
        found = shutil.which(argv0, mode=os.F_OK, path=env.get("PATH", os.defpath))
        if found is None:
            raise SpawnError(f"{argv0!r} was not found")
        path = found
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise SpawnError(f"{argv0!r} is not executable (Permission denied)")
    return path if os.sep not in argv0 else argv0


async def spawn(argv: tuple[str, ...], cwd: str, env: Mapping[str, str]) -> ChildProcess:
    """Start `argv` in its own session (and its own cgroup when available) with pipes for stdio.

    Raises SpawnError with a readable reason when the program cannot be started.
    """
    token = uuid.uuid4().hex
    full_env = {**os.environ, **env, RUN_TOKEN_ENV: token}
    # exec would refuse it with a ValueError deep inside; every engine gets the same clear SpawnError.
    if any("\0" in part for part in (*argv, cwd, *env.keys(), *env.values())):
        raise SpawnError("the command line, working directory or environment holds a NUL byte")
    chosen = await anyio.to_thread.run_sync(containment.hierarchy)
    group: RunCgroup | None = None
    launch = list(argv)
    if chosen is not None:
        program = _check_program(argv[0], cwd, full_env)
        group = containment.create_run_cgroup(chosen)
        if group is not None:
            launch = list(group.wrap((program, *argv[1:])))
    _spawning[token] = now_ticks()
    _live_tokens.add(token)
    # The bridge makes pi's stdin pipe itself: its writes then need no trip through the loop.
    stdin_read, stdin_write = os.pipe()
    process: anyio.abc.Process | None = None
    try:
        # Shielded: a cancel landing between the fork and the end of the spawn (a pre-spawn as
        # the bridge stops) left a child whose pid no one held. The caller holds it, and stops it.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                launch,
                stdin=stdin_read,
                stdout=-1,
                stderr=-1,
                cwd=cwd,
                env=full_env,
                start_new_session=True,
            )
    except OSError as exc:
        _discard(group)
        _live_tokens.discard(token)
        raise _spawn_error(exc, argv, cwd) from exc
    except BaseException:  # no empty cgroup left
        _discard(group)
        _live_tokens.discard(token)
        raise
    finally:
        os.close(stdin_read)
        if process is None:
            os.close(stdin_write)
        floor = _spawning.pop(token)
    assert process is not None  # open_process returned, or raised above
    _spawned_pids.add(process.pid)
    with anyio.CancelScope(shield=True):  # the child is ours now: it must not lose its stdin
        stdin = await StdinPipe.open(stdin_write)
    return _tracked(
        ChildProcess(
            process=process,
            token=token,
            argv=argv,
            stdin=stdin,
            start_ticks=floor,
            cgroup=group,
            env=full_env,
        )
    )


def _spawn_error(exc: OSError, argv: tuple[str, ...], cwd: str) -> SpawnError:
    """Why the program could not be started, in words."""
    if isinstance(exc, FileNotFoundError):
        if exc.filename == cwd:
            return SpawnError(f"working directory {cwd!r} does not exist")
        missing = exc.filename if exc.filename and exc.filename != cwd else argv[0]
        return SpawnError(f"{missing!r} was not found")
    if isinstance(exc, PermissionError):
        return SpawnError(f"{argv[0]!r} is not executable ({exc.strerror})")
    return SpawnError(f"{argv[0]!r} could not be started: {exc.strerror or exc}")


def _tracked(child: ChildProcess) -> ChildProcess:
    """The new child with its psutil handle, its true start time and a pidfd where there is one."""
    pid = child.pid
    with contextlib.suppress(psutil.Error):
        child.handle = psutil.Process(pid)
    stat = read_stat(pid)
    if stat is not None:
        child.start_ticks = stat.start
    if hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            child.pidfd = os.pidfd_open(pid)
    return child


def _discard(group: RunCgroup | None) -> None:
    if group is not None:
        group.remove()


def forget(child: ChildProcess) -> None:
    """Stop tracking a child whose exit status the event loop has collected; remove its cgroup."""
    _spawned_pids.discard(child.pid)
    _live_tokens.discard(child.token)
    child.stdin.close_now()
    if child.pidfd is not None:
        with contextlib.suppress(OSError):
            os.close(child.pidfd)
        child.pidfd = None
    if child.cgroup is not None and not child.cgroup.remove():
        # Zombies not yet reaped keep it populated: `reap_orphans` removes it once they are.
        _cgroups_to_remove.append(child.cgroup)


def _remove_empty_cgroups() -> None:
    _cgroups_to_remove[:] = [group for group in _cgroups_to_remove if not group.remove()]


@atexit.register
def _remove_cgroups_at_exit() -> None:
    """The bridge is exiting: the cgroups whose removal was put off get a last, short chance."""
    deadline = time.monotonic() + 1.0
    while _cgroups_to_remove and time.monotonic() < deadline:
        reap_orphans()
        time.sleep(0.01)


def run_own(
    argv: Sequence[str], *, stdin: bytes | None, env: Mapping[str, str], cwd: str, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run a short helper of the bridge's own (git, for checkpoints) to its end; blocking.

    While it runs its pid counts as spawned: no run's tree containment takes it for an orphan
    the bridge adopted, and the orphan reaper leaves its exit to this wait. Raises OSError, and
    subprocess.TimeoutExpired (the helper killed first).
    """
    # Like an agent's spawn, the helper holds a token of ours from its fork on: until its pid is
    # recorded, neither a run's tree search nor the orphan reaper takes it for an adopted orphan.
    token = uuid.uuid4().hex
    _live_tokens.add(token)
    _spawning[token] = now_ticks()
    try:
        with subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, RUN_TOKEN_ENV: token},
            cwd=cwd,
        ) as proc:
            _spawned_pids.add(proc.pid)
            _spawning.pop(token, None)
            try:
                try:
                    out, err = proc.communicate(stdin, timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    raise
            finally:
                _spawned_pids.discard(proc.pid)
    finally:
        _spawning.pop(token, None)
        _live_tokens.discard(token)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


async def end_strays(wait: float = STRAY_WAIT_SECONDS) -> list[int]:
    """Kill every child the bridge still has, and wait (bounded) until each is gone and reaped:
    the last step of the bridge's stop, once every run and agent was stopped. Whatever is left
    then is a run's process that no stop held (its spawn cut short by the stop itself)."""
    found: set[int] = set()
    deadline = time.monotonic() + wait
    while True:
        left = own_children()
        for pid in left:
            stat = read_stat(pid)
            if stat is not None and not stat.zombie:
                found.add(pid)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if not left or time.monotonic() >= deadline:
            return sorted(found)
        # A spawn's own exit status is the loop's to collect; one nobody waits on, collected here.
        for pid in left:
            if pid not in _spawned_pids:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
        await anyio.sleep(STRAY_POLL_SECONDS)


def live_token_held(environ: bytes) -> str | None:
    """The token of a live spawn of ours that this environment (a /proc environ) holds, if any."""
    for entry in environ.split(b"\0"):
        if entry.startswith(TOKEN_PREFIX):
            token = entry[len(TOKEN_PREFIX) :].decode("ascii", "replace")
            if token in _live_tokens:
                return token
    return None


def may_be_a_spawn_under_way(start: int) -> bool:
    """Whether a process started at `start` (clock ticks) may be a spawn of ours not yet recorded."""
    return any(floor <= start for floor in list(_spawning.values()))


def is_spawned(pid: int) -> bool:
    """Whether `pid` is an agent this bridge spawned and has not yet forgotten."""
    return pid in _spawned_pids
