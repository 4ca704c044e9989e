"""Stop everything a run started, in three stages, and say so in a receipt."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Final

import anyio
import anyio.to_thread

from bridge.contract import ShutdownReceipt, ShutdownStage
from bridge.process.procfs import ProcStat, all_stats, read_cmdline, read_environ, read_stat
from bridge.process.spawn import (
    TOKEN_PREFIX,
    ChildProcess,
    is_spawned,
    live_token_held,
    may_be_a_spawn_under_way,
    reap_orphans,
)

log = logging.getLogger(__name__)

GRACE_SECONDS: Final = 2.0
KILL_WAIT_SECONDS: Final = 5.0
# After the agent itself exited, how long its leftover descendants get before the kill: the agent
# was the one that would have stopped them gracefully, and nobody else will.
ORPHAN_GRACE_SECONDS: Final = 0.1
POLL_SECONDS: Final = 0.01
# A kill's round waits this long at most for what it killed to end (woken at the end itself by
# pidfds; a big process's teardown outlasts a poll tick), then looks again.
KILL_ROUND_SECONDS: Final = 0.1
# Between the pidfd saying "exited" and the loop's child watcher recording the status.
_STATUS_POLL_SECONDS: Final = 0.002
# Without a pidfd (not Linux), the exit is seen by polling the status the child watcher records.
_EXIT_POLL_SECONDS: Final = 0.02


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
    """The run's live processes in tree mode: the agent's tree, token holders, adopted orphans."""
    stats = all_stats()
    kids: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        kids.setdefault(stat.ppid, []).append(pid)
    found: dict[int, int] = {}
    stack = _tree_roots(child, stats)
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


def _tree_roots(child: ChildProcess, stats: Mapping[int, ProcStat]) -> list[int]:
    """Where the walk starts: the agent while it is still ours, and every process started after
    it that holds its token or was adopted by this process and belongs to no other spawn.

    A child of ours between its fork and its exec, while a spawn is under way, still has this
    process's own environment and its pid is not yet recorded: it is that spawn, not an orphan. A token
    counts only while a spawn of ours holds it, so an escaped process cannot claim one it made up.
    """
    me = os.getpid()
    roots: list[int] = []
    root = stats.get(child.pid)
    # Walk from the agent only while it is the process we spawned and not yet reaped.
    if child.returncode is None and root is not None and root.start == child.start_ticks:
        roots.append(child.pid)
    needle = TOKEN_PREFIX + child.token.encode()
    own_environ: bytes | None = None
    for pid, stat in stats.items():
        if stat.start < child.start_ticks or pid in (me, child.pid):
            continue  # older than the agent: cannot hold its token nor be its orphan
        environ = read_environ(pid)
        if needle in environ:
            roots.append(pid)
        elif stat.ppid == me and not is_spawned(pid) and live_token_held(environ) is None:
            if own_environ is None:
                own_environ = read_environ(me)
            if environ != own_environ or not may_be_a_spawn_under_way(stat.start):
                roots.append(pid)  # adopted during the run, no other spawn's: an escaped one
    return roots


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


def members_now(child: ChildProcess) -> list[int]:
    """What `child` holds now besides itself, from one kernel read where it has a cgroup (its
    cgroup.procs), else as `contained_now` finds it: cheap enough to take before a signal that
    may make the agent end them at once."""
    if child.cgroup is not None:
        return [pid for pid in child.cgroup.members() if pid != child.pid]
    return contained_now(child)


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
    _kill_exact(alive, spare)


def _kill_exact(alive: Mapping[int, int], spare: int | None) -> None:
    """SIGKILL each process of `alive` but `spare` that is still the one that started then."""
    for pid, start in alive.items():
        if pid != spare:
            _signal_exact(pid, start, signal.SIGKILL)


def _pidfds(alive: Mapping[int, int], spare: int | None) -> list[int]:
    """A pidfd of each process of `alive` but `spare` that is still the one that started then
    (none without pidfds): readable once it has ended, what the kill's wait waits on."""
    fds: list[int] = []
    if not hasattr(os, "pidfd_open"):
        return fds
    for pid, start in alive.items():
        if pid == spare:
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        stat = read_stat(pid)
        if stat is not None and stat.start == start:
            fds.append(fd)
        else:
            os.close(fd)
    return fds


async def _ended(fds: Sequence[int], timeout: float) -> None:
    """Wait until every process of `fds` has ended, at most `timeout` s (without pidfds: that
    long); the fds are closed."""
    try:
        with anyio.move_on_after(timeout):
            if not fds:
                await anyio.sleep(timeout)
            for fd in fds:
                await anyio.wait_readable(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _kill_by_pidfd(fds: Sequence[int]) -> None:
    """SIGKILL each process of `fds` (pidfds of the exact processes: no pid reuse can misdirect it)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)


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
    child: ChildProcess,
    seen: dict[int, int],
    wait: float,
    spare: int | None,
    keep: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Kill every live process of `seen` (rescanned each tick) but `spare` (and `keep`, with
    their descendants); what is left alive. A tick ends as soon as what it killed has ended."""
    deadline = time.monotonic() + wait
    while True:
        alive = _kept(await _scan(child, seen), keep or {})
        if spare is not None:
            alive.pop(spare, None)
        seen.update(alive)
        if not alive or time.monotonic() >= deadline:
            return alive
        fds = _pidfds(alive, spare)
        try:
            if child.cgroup is not None and not keep:
                await anyio.to_thread.run_sync(_kill, child, alive, spare)
            elif fds:
                # These processes exactly, on the loop (a few signals); with processes to keep, a
                # cgroup-wide kill would take them too (the next round finds what forked meanwhile).
                _kill_by_pidfd(fds)
            else:
                _kill_exact(alive, spare)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        reap_orphans()
        # Woken as soon as they have ended (pidfds); a round's bound only for one that has not.
        await _ended(fds, KILL_ROUND_SECONDS if fds else POLL_SECONDS)


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


class ExactKeep(dict[int, int]):
    """A `keep` of these processes only, not their descendants: the agent an ACP adapter runs
    as its child (pi under pi-acp) stays, what that agent started during a run does not."""


def helpers_now(child: ChildProcess) -> dict[int, int]:
    """What `child` holds now besides itself, pid -> start time (see `stop_descendants`'s `keep`)."""
    found: dict[int, int] = {}
    for pid in members_now(child):
        stat = read_stat(pid)
        if stat is not None and not stat.zombie:
            found[pid] = stat.start
    return found


def started_as_now(
    child: ChildProcess, argvs: Sequence[tuple[str, ...]], under: Mapping[int, int]
) -> ExactKeep:
    """What the processes of `under` (of `child`'s) started that runs as one of `argvs` (a
    program's name and its arguments), with all it started: the MCP servers of the agent an ACP
    adapter runs, the oldest process of each command line. One orphaned (its starter gone) is not
    among them."""
    if not argvs or not under:
        return ExactKeep()
    stats = {pid: stat for pid in members_now(child) if (stat := read_stat(pid)) and not stat.zombie}
    wanted = {(os.path.basename(argv[0]), *argv[1:]) for argv in argvs if argv}
    below = ExactKeep(under)
    grew = True
    while grew:  # everything `under` started
        more = {pid: st.start for pid, st in stats.items() if st.ppid in below and pid not in below}
        below.update(more)
        grew = bool(more)
    # One process per server, the first started: a tool's copy of a server's command line, started
    # after it, is the run's and is swept.
    first: dict[tuple[str, ...], tuple[int, int]] = {}
    for pid in below.keys() - under.keys():
        argv = read_cmdline(pid)
        key = (os.path.basename(argv[0]), *argv[1:]) if argv else ()
        if key in wanted and (key not in first or (below[pid], pid) < first[key]):
            first[key] = (below[pid], pid)
    found = ExactKeep({pid: start for start, pid in first.values()})
    grew = True
    while grew:  # and what those started
        more = {p: below[p] for p in below if p not in found and (st := stats.get(p)) and st.ppid in found}
        found.update(more)
        grew = bool(more)
    return found


def children_now(child: ChildProcess, wrappers: int = 0) -> ExactKeep:
    """`child`'s own children now (not their descendants), as an `ExactKeep`; for a child that
    runs its program under `wrappers` processes (a sandbox's), those, the program and its own
    children."""
    found = ExactKeep()
    stats = {pid: read_stat(pid) for pid in members_now(child)}
    parents = {child.pid}
    for _ in range(wrappers + 1):
        level = {pid: s for pid, s in stats.items() if s is not None and not s.zombie and s.ppid in parents}
        found.update((pid, stat.start) for pid, stat in level.items())
        parents = set(level)
    return found


def _kept(found: dict[int, int], keep: Mapping[int, int]) -> dict[int, int]:
    """`found` without the processes of `keep` (the same pid and start) and, unless `keep` is an
    `ExactKeep`, their descendants."""
    if not keep:
        return found
    if isinstance(keep, ExactKeep):
        return {pid: start for pid, start in found.items() if keep.get(pid) != start}
    kept = {pid for pid, start in found.items() if keep.get(pid) == start}
    if not kept:
        return found
    left: dict[int, int] = {}
    for pid, start in found.items():
        ancestor, hops = pid, 0
        while ancestor not in kept and ancestor > 1 and hops < 64:
            stat = read_stat(ancestor)
            ancestor, hops = (stat.ppid if stat is not None else 0), hops + 1
        if ancestor not in kept:
            left[pid] = start
    return left


async def stop_descendants(
    child: ChildProcess, *, grace: float = 0.0, keep: Mapping[int, int] | None = None
) -> ShutdownReceipt:
    """Kill every process contained with `child` EXCEPT the child itself; a truthful receipt.

    For a long-lived agent (rpc mode) whose run is over while it must stay: its cgroup (or its
    tree, token holders and adopted orphans) is emptied of everything else, except the processes
    of `keep` (pid -> start time, from `helpers_now`) and their descendants: the agent's own
    helpers from before the run, such as its MCP servers. With `grace` > 0 they get SIGTERM and
    that long first. Waits up to 5 s for them to die; stage `exited` when none were found,
    `interrupted` when SIGTERM sufficed, else `killed`; survivors are checked.
    """
    with anyio.CancelScope(shield=True):
        started = time.monotonic()
        keep = keep or {}
        seen = _kept(await _scan(child, {}, besides_child=True), keep)
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
            alive = _kept(await _scan(child, seen, besides_child=True), keep)
            while alive and time.monotonic() < deadline:
                await anyio.sleep(POLL_SECONDS)
                alive = _kept(await _scan(child, seen, besides_child=True), keep)
        # Without a grace, the first scan is what is left (a second would only delay the kill).
        left = _kept(await _scan(child, seen, besides_child=True), keep) if grace > 0 else seen
        checked = False
        if left:
            stage = "killed"
            alive = await _kill_until_gone(child, seen, KILL_WAIT_SECONDS, child.pid, keep)
            checked = not alive  # its last scan found nothing: that was the check
        reap_orphans()
        survivors = {} if checked else _kept(await _scan(child, seen, besides_child=True), keep)
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
