"""Agent processes: spawn contained, frame stdout lines, stop everything a run started, in stages.

Containment (what "everything" means), chosen once per bridge (bridge/process/containment.py):
- `cgroup`: each agent runs in a cgroup of its own, entered before exec. Whatever its tools do
  (new sessions, double forks, `env -i`), every process they start is listed in that cgroup, and
  the kill is `cgroup.kill` (v2) or freeze-kill-thaw (v1). The cgroup is removed afterwards.
- `tree` (no writable cgroup, or PI_BRIDGE_CONTAINMENT=tree): the run's processes are found three
  ways, because tools escape each one alone: the live descendants of the agent; every process whose
  environment carries this run's token (`PI_BRIDGE_RUN_TOKEN`), inherited across sessions and
  double forks; and, the bridge being a child subreaper (Linux), every orphan adopted by it during
  the run that is not one of its own spawns and carries no other run's token (`env -i` clears the
  token, but the orphan still comes back to the bridge).

Every scan is ONE pass over /proc per tick, in a worker thread (never on the event loop: with
thousands of processes a pass takes long, and reading the environ of a process in D state
can block). Only processes started after the agent (their start time, from /proc/<pid>/stat) can
belong to it, so only their environ is read. Processes are identified by (pid, start time), the
agent by the handle and pidfd taken at spawn, so a reused pid is never walked from nor killed.

The agent's exit is watched on its pidfd, not on its pipes: a helper that keeps stdout open does
not hide that the agent itself is gone. Zombies count as dead everywhere.

Entry points: `spawn`; `wait_exit`; `shutdown_tree` (the three stages, the agent included);
`stop_descendants` (everything but the agent, for a long-lived one); `sweep_leftovers` (after the
agent exited on its own); `reap_orphans` (the idle reaper); `forget` (after the exit status).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import select
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

import anyio
import anyio.abc
import anyio.to_thread
import psutil

from bridge.contract import Containment, ShutdownReceipt, ShutdownStage
from bridge.process import containment
from bridge.process.containment import RunCgroup
from bridge.process.stdin_pipe import StdinPipe

log = logging.getLogger(__name__)

RUN_TOKEN_ENV: Final = "PI_BRIDGE_RUN_TOKEN"
GRACE_SECONDS: Final = 2.0
KILL_WAIT_SECONDS: Final = 5.0
# After the agent itself exited, how long its leftover descendants get before the kill: the agent
# was the one that would have stopped them gracefully, and nobody else will.
ORPHAN_GRACE_SECONDS: Final = 0.1
POLL_SECONDS: Final = 0.01
# Between the pidfd saying "exited" and the loop's child watcher recording the status.
_STATUS_POLL_SECONDS: Final = 0.002
# Without a pidfd (not Linux), the exit is seen by polling the status the child watcher records.
_EXIT_POLL_SECONDS: Final = 0.02
# An agent's end-of-run event may repeat the whole conversation, prompt included: a huge prompt
# makes a huge line. Longer lines are dropped as diagnostics so memory stays bounded per run.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
_PR_SET_CHILD_SUBREAPER: Final = 36
_TOKEN_PREFIX: Final = f"{RUN_TOKEN_ENV}=".encode()
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_spawned_pids: set[int] = set()
# Start-time floors of spawns under way: their pid is a child of ours before `spawn` records it,
# and its exit status belongs to the loop's child watcher, not to `reap_orphans`.
_spawning: dict[str, int] = {}
_cgroups_to_remove: list[RunCgroup] = []


class SpawnError(Exception):
    """The agent could not be started (missing, not executable, bad cwd...)."""


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


# --------------------------------------------------------------------------- /proc readers


class ProcStat(NamedTuple):
    """What one read of /proc/<pid>/stat tells: parent, start time (clock ticks), zombie."""

    ppid: int
    start: int
    zombie: bool


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat of one process, or None when it is gone (never blocks on D state)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(int(fields[1]), int(fields[19]), fields[0] in (b"Z", b"X"))
    except (IndexError, ValueError):
        return None


def _read_environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _now_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat start times use (rounded down)."""
    try:
        with open("/proc/uptime", "rb") as handle:
            return max(0, int(float(handle.read().split()[0]) * _CLOCK_TICKS) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def _all_stats() -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                pid = int(entry.name)
                stat = read_stat(pid)
                if stat is not None:
                    stats[pid] = stat
    return stats


_children_files: list[bool] = []


def _own_children() -> list[int]:
    """This process's children: /proc/self/task/*/children (each thread's), or psutil without it."""
    if not _children_files:
        _children_files.append(os.path.exists(f"/proc/self/task/{os.getpid()}/children"))
    if not _children_files[0]:
        try:
            return [proc.pid for proc in psutil.Process().children(recursive=False)]
        except psutil.Error:
            return []
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as handle:
                pids.extend(int(pid) for pid in handle.read().split())
        except OSError:
            continue  # that thread ended meanwhile
    return pids


def reap_orphans() -> list[int]:
    """Collect the exit status of zombie children we did not spawn ourselves (adopted orphans).

    Cheap enough for the event loop: it reads only our own children, not all of /proc. Our own
    spawns are left to the loop's child watcher, which waits on them by pid.
    """
    reaped: list[int] = []
    floor = min(_spawning.values(), default=None)
    for pid in _own_children():
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


# --------------------------------------------------------------------------- spawning


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
    _spawning[token] = _now_ticks()
    # The bridge makes pi's stdin pipe itself: its writes then need no trip through the loop.
    stdin_read, stdin_write = os.pipe()
    process: anyio.abc.Process | None = None
    try:
        process = await anyio.open_process(
            launch,
            stdin=stdin_read,
            stdout=-1,
            stderr=-1,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        _discard(group)
        missing = exc.filename if exc.filename and exc.filename != cwd else argv[0]
        if exc.filename == cwd:
            raise SpawnError(f"working directory {cwd!r} does not exist") from exc
        raise SpawnError(f"{missing!r} was not found") from exc
    except PermissionError as exc:
        _discard(group)
        raise SpawnError(f"{argv[0]!r} is not executable ({exc.strerror})") from exc
    except OSError as exc:
        _discard(group)
        raise SpawnError(f"{argv[0]!r} could not be started: {exc.strerror or exc}") from exc
    except BaseException:  # cancelled mid-spawn (a warm-pool pre-spawn at shutdown): no empty cgroup left
        _discard(group)
        raise
    finally:
        os.close(stdin_read)
        if process is None:
            os.close(stdin_write)
        floor = _spawning.pop(token)
    pid = process.pid
    _spawned_pids.add(pid)
    with anyio.CancelScope(shield=True):  # the child is ours now: it must not lose its stdin
        stdin = await StdinPipe.open(stdin_write)
    child = ChildProcess(
        process=process, token=token, argv=argv, stdin=stdin, start_ticks=floor, cgroup=group
    )
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


# --------------------------------------------------------------------------- what a run contains


def scan_contained(
    child: ChildProcess, seen: Mapping[int, int], *, besides_child: bool = False
) -> dict[int, int]:
    """The live (non-zombie) processes contained with `child`, plus those of `seen` still alive;
    with `besides_child`, `child` itself left out.

    pid -> start time. Blocking (one pass over /proc in tree mode): call it off the event loop.
    """
    if child.cgroup is not None:
        found: dict[int, int] = {}
        # The agent itself counts even before its shim has written it into the cgroup (a stop
        # right after the spawn): it forks nothing until it has.
        own = [child.pid] if child.returncode is None else []
        for pid in {*child.cgroup.members(), *seen, *own}:
            if besides_child and pid == child.pid:
                continue  # not read at all: after an idle spell a /proc read is slow
            stat = read_stat(pid)
            if stat is not None and not stat.zombie and seen.get(pid, stat.start) == stat.start:
                found[pid] = stat.start
        return found
    found = _scan_tree(child, seen)
    if besides_child:
        found.pop(child.pid, None)
    return found


def _scan_tree(child: ChildProcess, seen: Mapping[int, int]) -> dict[int, int]:
    stats = _all_stats()
    me = os.getpid()
    kids: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        kids.setdefault(stat.ppid, []).append(pid)
    roots: list[int] = []
    root = stats.get(child.pid)
    # Walk from the agent only while it is the process we spawned and not yet reaped.
    if child.returncode is None and root is not None and root.start == child.start_ticks:
        roots.append(child.pid)
    needle = _TOKEN_PREFIX + child.token.encode()
    for pid, stat in stats.items():
        if stat.start < child.start_ticks or pid in (me, child.pid):
            continue  # older than the agent: cannot hold its token nor be its orphan
        environ = _read_environ(pid)
        if needle in environ:
            roots.append(pid)
        elif stat.ppid == me and pid not in _spawned_pids and _TOKEN_PREFIX not in environ:
            roots.append(pid)  # adopted during the run, no other run's token: an escaped one
    found: dict[int, int] = {}
    stack = roots
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found[pid] = stats[pid].start
        stack.extend(kids.get(pid, ()))
    for pid, start in seen.items():
        known = stats.get(pid)
        if known is not None and known.start == start:
            found[pid] = start
    return {pid: start for pid, start in found.items() if not stats[pid].zombie}


async def _scan(
    child: ChildProcess, seen: Mapping[int, int], *, besides_child: bool = False
) -> dict[int, int]:
    if child.cgroup is not None:
        # A few small kernel files (cgroup.procs, then each member's stat): microseconds, less
        # than a hop to a worker thread; only the tree mode's pass over all of /proc is slow.
        return scan_contained(child, seen, besides_child=besides_child)
    return await anyio.to_thread.run_sync(
        functools.partial(scan_contained, child, dict(seen), besides_child=besides_child)
    )


def contained_now(child: ChildProcess) -> list[int]:
    """What `child` holds now besides itself, found without a pass over /proc (safe to call in
    a callback): its cgroup's members, else its live descendants by their parent links. The
    tree mode's token holders and adopted orphans need `contained_besides`."""
    if child.cgroup is not None:
        return sorted(scan_contained(child, {}, besides_child=True))
    found: list[int] = []
    stack = [child.pid] if child.returncode is None else []
    while stack:
        pid = stack.pop()
        for tid in _listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                    kids = [int(kid) for kid in handle.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                stat = read_stat(kid)
                if stat is not None and not stat.zombie and kid not in found:
                    found.append(kid)
                    stack.append(kid)
    return sorted(found)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


async def contained_besides(child: ChildProcess) -> list[int]:
    """The live processes contained with `child` (its cgroup, else its tree and token holders),
    `child` itself left out: what a run of a long-lived agent has started and not yet ended."""
    return sorted(await _scan(child, {}, besides_child=True))


def _kill(child: ChildProcess, alive: Mapping[int, int], spare: int | None) -> None:
    """SIGKILL what is alive (blocking: a v1 freeze waits; call it off the loop)."""
    if child.cgroup is not None:
        if spare is None:
            child.cgroup.kill_all()
            if child.pid in alive:  # maybe not in the cgroup yet (see scan_contained)
                _signal_exact(child.pid, alive[child.pid], signal.SIGKILL)
        else:
            child.cgroup.kill_members(spare)
        return
    for pid, start in alive.items():
        if pid != spare:
            _signal_exact(pid, start, signal.SIGKILL)


def _signal_exact(pid: int, start: int, signum: signal.Signals) -> None:
    """Signal the process `pid` only if it is still the one that started at `start`."""
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            stat = read_stat(pid)
            if stat is not None and stat.start == start:
                signal.pidfd_send_signal(fd, signum)
        except OSError:
            pass
        finally:
            os.close(fd)
        return
    stat = read_stat(pid)
    if stat is not None and stat.start == start:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


# --------------------------------------------------------------------------- waiting and stopping


async def wait_exit(child: ChildProcess, timeout: float) -> bool:
    """Wait up to `timeout` s for the child itself to exit (not its pipes to close); whether it has."""
    with anyio.move_on_after(timeout):
        await _exited(child)
    return child.returncode is not None


async def _exited(child: ChildProcess) -> None:
    if child.returncode is None and child.pidfd is not None:
        # One duplicate per waiter: several tasks may wait on the same agent at once.
        try:
            fd = os.dup(child.pidfd)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                await anyio.wait_readable(fd)
            finally:
                os.close(fd)
    while child.returncode is None:
        # The loop's child watcher records the status right after the exit; only it may reap.
        await anyio.sleep(_STATUS_POLL_SECONDS if child.pidfd is not None else _EXIT_POLL_SECONDS)


def _receipt(
    child: ChildProcess, stage: ShutdownStage, started: float, seen: Mapping[int, int], survivors: list[int]
) -> ShutdownReceipt:
    receipt = ShutdownReceipt(
        stage=stage,
        elapsed_ms=round((time.monotonic() - started) * 1000, 2),
        pids=sorted(seen),
        survivors=sorted(survivors),
        containment=child.containment,
    )
    if survivors:
        log.error("processes survived the shutdown of pid %d: %s", child.pid, receipt.survivors)
    elif log.isEnabledFor(logging.INFO):  # the dump is not free: every run's end comes here
        log.info("pid %d: processes stopped: %s", child.pid, receipt.model_dump_json())
    return receipt


async def _kill_until_gone(
    child: ChildProcess, seen: dict[int, int], wait: float, spare: int | None
) -> dict[int, int]:
    """Kill every live process of `seen` (rescanned each tick) but `spare`; what is left alive."""
    deadline = time.monotonic() + wait
    while True:
        alive = await _scan(child, seen)
        if spare is not None:
            alive.pop(spare, None)
        seen.update(alive)
        if not alive or time.monotonic() >= deadline:
            return alive
        await anyio.to_thread.run_sync(_kill, child, alive, spare)
        reap_orphans()
        await anyio.sleep(POLL_SECONDS)


async def shutdown_tree(
    child: ChildProcess,
    interrupt: signal.Signals = signal.SIGTERM,
    *,
    grace: float = GRACE_SECONDS,
    kill_wait: float = KILL_WAIT_SECONDS,
) -> ShutdownReceipt:
    """Stop the child and every process contained with it; return a receipt that checked survivors.

    Runs shielded: nothing (a second cancel, shutdown, loop teardown) interrupts it once begun.
    """
    with anyio.CancelScope(shield=True):
        started = time.monotonic()
        seen = await _scan(child, {})
        stage: ShutdownStage = "exited"
        if seen:
            stage = "interrupted"
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(interrupt)
                await wait_exit(child, grace)
            deadline = time.monotonic() + min(
                ORPHAN_GRACE_SECONDS, max(0.0, grace - (time.monotonic() - started))
            )
            alive = await _scan(child, seen)
            seen.update(alive)
            while alive and time.monotonic() < deadline:
                await anyio.sleep(POLL_SECONDS)
                alive = await _scan(child, seen)
                seen.update(alive)
            if alive:
                stage = "killed"
                await _kill_until_gone(child, seen, kill_wait, None)
        if child.returncode is None:
            await wait_exit(child, 0.5)
        reap_orphans()
        survivors = await _scan(child, seen)
        seen.update(survivors)
    return _receipt(child, stage, started, seen, list(survivors))


async def stop_descendants(child: ChildProcess, *, grace: float = 0.0) -> ShutdownReceipt:
    """Kill every process contained with `child` EXCEPT the child itself; a truthful receipt.

    For a long-lived agent (rpc mode) whose run is over while it must stay: its cgroup (or its
    tree, token holders and adopted orphans) is emptied of everything else. With `grace` > 0 they
    get SIGTERM and that long first. Waits up to 5 s for them to die; stage `exited` when none
    were found, `interrupted` when SIGTERM sufficed, else `killed`; survivors are checked.
    """
    with anyio.CancelScope(shield=True):
        started = time.monotonic()
        seen = await _scan(child, {}, besides_child=True)
        if not seen:
            # Nothing besides the agent: that scan was the check, a second would only delay
            # the run's answer. (What the agent killed may linger as our zombies, dead: the
            # server's periodic reaping collects them, off the answer's path.)
            return _receipt(child, "exited", started, seen, [])
        stage: ShutdownStage = "interrupted"
        if grace > 0:
            for pid, start in seen.items():
                _signal_exact(pid, start, signal.SIGTERM)
            deadline = time.monotonic() + grace
            alive = await _scan(child, seen, besides_child=True)
            while alive and time.monotonic() < deadline:
                await anyio.sleep(POLL_SECONDS)
                alive = await _scan(child, seen, besides_child=True)
        left = await _scan(child, seen, besides_child=True)
        if left or grace <= 0:
            stage = "killed"
            await _kill_until_gone(child, seen, KILL_WAIT_SECONDS, child.pid)
        reap_orphans()
        survivors = await _scan(child, seen, besides_child=True)
        seen.update(survivors)
    return _receipt(child, stage, started, seen, list(survivors))


async def sweep_leftovers(child: ChildProcess) -> list[int]:
    """After the agent exited on its own, kill whatever it left behind (its cgroup or its tree)."""
    with anyio.CancelScope(shield=True):
        leftovers = await _scan(child, {})
        killed: list[int] = []
        if leftovers:
            receipt = await shutdown_tree(child, signal.SIGKILL, grace=0.0)
            log.warning("pid %d left %d processes behind; killed %s", child.pid, len(leftovers), receipt.pids)
            killed = receipt.pids
        reap_orphans()
    return killed


# --------------------------------------------------------------------------- line framing


class LineFramer:
    """Split a byte stream into lines on b"\\n" only, with a bound on line length.

    pi writes U+2028/U+2029/U+0085 raw inside JSON strings, so `splitlines()` would cut events
    apart. A line longer than `max_line` is dropped (memory stays bounded) and reported through
    `oversized` as a short description, to become a diagnostic.
    """

    __slots__ = (
        "_discarded",
        "_discarding",
        "_head",
        "_parts",
        "_size",
        "max_line",
        "oversized",
        "oversized_heads",
    )

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._discarding = False
        self._discarded = 0
        self._head = b""
        self.oversized: list[str] = []
        self.oversized_heads: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the complete lines (without b"\\n") that `chunk` finishes."""
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if lines:
            first = lines[0]
            if self._discarding:
                self._note_oversized(self._discarded + len(first))
                lines = lines[1:]
            elif self._parts:
                self._parts.append(first)
                lines[0] = b"".join(self._parts)
                self._parts.clear()
                self._size = 0
            self._discarding = False
            if any(len(line) > self.max_line for line in lines):
                kept: list[bytes] = []
                for line in lines:
                    if len(line) > self.max_line:
                        self._head = line[:200]
                        self._note_oversized(len(line))
                    else:
                        kept.append(line)
                lines = kept
        self._append_partial(tail)
        return lines

    def finish(self) -> bytes | None:
        """At end of stream: the last line if it had no newline (and was within bounds)."""
        if self._discarding:
            self._note_oversized(self._discarded)
            self._discarding = False
            return None
        if not self._parts:
            return None
        line = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        return line or None

    def _append_partial(self, tail: bytes) -> None:
        if not tail:
            return
        if self._discarding:
            self._discarded += len(tail)
            return
        self._parts.append(tail)
        self._size += len(tail)
        if self._size > self.max_line:
            joined = b"".join(self._parts)
            self._head = joined[:200]
            self._discarded = len(joined)
            self._parts.clear()
            self._size = 0
            self._discarding = True

    def _note_oversized(self, size: int) -> None:
        head = self._head.decode("utf-8", "replace")
        self.oversized_heads.append(self._head)
        self.oversized.append(
            f"line of {size} bytes over the {self.max_line}-byte bound dropped; it began: {head}"
        )
        self._discarded = 0
        self._head = b""


class TailBuffer:
    """Keep the last `limit` bytes written to it (a bounded stderr tail)."""

    __slots__ = ("_chunks", "_size", "limit")

    def __init__(self, limit: int = 16 * 1024) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        """Append data, dropping the oldest bytes beyond the limit."""
        self._chunks.append(data)
        self._size += len(data)
        if self._size > 2 * self.limit:
            joined = b"".join(self._chunks)[-self.limit :]
            self._chunks = [joined]
            self._size = len(joined)

    def text(self) -> str:
        """The kept tail, decoded leniently."""
        return b"".join(self._chunks)[-self.limit :].decode("utf-8", "replace")
