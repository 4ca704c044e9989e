"""Agent processes: spawn in their own session, frame stdout lines, stop the whole tree in stages.

The three-stage shutdown (interrupt, graceful wait up to 2 s, kill the whole tree and wait up to
5 s) finds the tree three ways, because agents' tools escape each one alone:
- the live descendants of the agent (psutil), snapshotted BEFORE any signal: once the agent is
  gone its children are reparented and no walk from it finds them;
- every process whose environment carries this run's token (`PI_BRIDGE_RUN_TOKEN`): children
  inherit it across new sessions, process groups and double forks;
- on Linux the bridge is a child subreaper, so orphans come back to it rather than to init, and
  `reap_orphans` collects their exit status (this container's pid 1 may not).
Zombies count as dead everywhere: they hold no resources but a pid.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.abc
import psutil

from bridge.contract import ShutdownReceipt, ShutdownStage

log = logging.getLogger(__name__)

RUN_TOKEN_ENV: Final = "PI_BRIDGE_RUN_TOKEN"
GRACE_SECONDS: Final = 2.0
KILL_WAIT_SECONDS: Final = 5.0
# After the agent itself exited, how long its leftover descendants get before the kill: the agent
# was the one that would have stopped them gracefully, and nobody else will.
ORPHAN_GRACE_SECONDS: Final = 0.1
POLL_SECONDS: Final = 0.01
# pi's agent_end line repeats the whole conversation, prompt included: a 50 MB prompt makes a
# 50 MB line. Longer lines are dropped as diagnostics so memory stays bounded per run.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
_PR_SET_CHILD_SUBREAPER: Final = 36

_spawned_pids: set[int] = set()
_subreaper = False


class SpawnError(Exception):
    """The agent could not be started (missing, not executable, bad cwd...)."""


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux), so orphaned descendants come back to it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result: int = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        global _subreaper
        _subreaper = result == 0
        return _subreaper
    except (OSError, AttributeError):
        return False


def reap_orphans() -> list[int]:
    """Collect the exit status of zombie children we did not spawn ourselves (adopted orphans).

    Our own spawns are left to the event loop's child watcher, which waits on them by pid.
    """
    reaped: list[int] = []
    me = os.getpid()
    try:
        children = psutil.Process(me).children(recursive=False)
    except psutil.Error:
        return reaped
    for child in children:
        if child.pid in _spawned_pids:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
            pid, _ = os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError, OSError):
            continue
        if pid:
            reaped.append(pid)
    return reaped


@dataclass(slots=True)
class ChildProcess:
    """A started agent process with its run token."""

    process: anyio.abc.Process
    token: str
    argv: tuple[str, ...]

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The agent's exit code (negative: killed by that signal), or None while it runs."""
        return self.process.returncode


async def spawn(argv: tuple[str, ...], cwd: str, env: Mapping[str, str]) -> ChildProcess:
    """Start `argv` in its own session with pipes for stdin, stdout and stderr.

    Raises SpawnError with a readable reason when the program cannot be started.
    """
    token = uuid.uuid4().hex
    full_env = {**os.environ, **env, RUN_TOKEN_ENV: token}
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=-1,
            stdout=-1,
            stderr=-1,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        missing = exc.filename if exc.filename and exc.filename != cwd else argv[0]
        if exc.filename == cwd:
            raise SpawnError(f"working directory {cwd!r} does not exist") from exc
        raise SpawnError(f"{missing!r} was not found") from exc
    except PermissionError as exc:
        raise SpawnError(f"{argv[0]!r} is not executable ({exc.strerror})") from exc
    except OSError as exc:
        raise SpawnError(f"{argv[0]!r} could not be started: {exc.strerror or exc}") from exc
    _spawned_pids.add(process.pid)
    return ChildProcess(process=process, token=token, argv=argv)


def forget(child: ChildProcess) -> None:
    """Stop tracking a child whose exit status the event loop has collected."""
    _spawned_pids.discard(child.pid)


# --------------------------------------------------------------------------- the process tree


def _is_alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _token_holders(token: str) -> list[psutil.Process]:
    needle = f"{RUN_TOKEN_ENV}={token}".encode()
    holders: list[psutil.Process] = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if needle in handle.read():
                    holders.append(psutil.Process(pid))
        except (OSError, psutil.Error):
            continue
    return holders


def snapshot_tree(child: ChildProcess) -> dict[int, psutil.Process]:
    """Every live process of the child's tree: descendants plus every holder of its run token."""
    found: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(child.pid)
        if _is_alive(root):
            found[root.pid] = root
        for proc in root.children(recursive=True):
            found[proc.pid] = proc
    except psutil.Error:
        pass
    if sys.platform.startswith("linux"):
        for proc in _token_holders(child.token):
            found.setdefault(proc.pid, proc)
    return {pid: proc for pid, proc in found.items() if _is_alive(proc)}


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    return [proc for proc in procs if _is_alive(proc)]


def _kill(procs: Iterable[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()  # psutil checks the pid still names the same process (create time)
        except psutil.Error:
            pass


async def wait_exit(child: ChildProcess, timeout: float) -> bool:
    """Wait up to `timeout` s for the child to exit; whether it has."""
    with anyio.move_on_after(timeout):
        await child.process.wait()
    return child.returncode is not None


async def shutdown_tree(
    child: ChildProcess,
    interrupt: signal.Signals = signal.SIGTERM,
    *,
    grace: float = GRACE_SECONDS,
    kill_wait: float = KILL_WAIT_SECONDS,
) -> ShutdownReceipt:
    """Stop the child and every process of its tree; return a receipt that checked survivors.

    Runs shielded: nothing (a second cancel, shutdown, loop teardown) interrupts it once begun.
    """
    with anyio.CancelScope(shield=True):
        started = time.monotonic()
        found = snapshot_tree(child)
        seen: dict[int, psutil.Process] = dict(found)
        stage: ShutdownStage = "exited"
        if found:
            stage = "interrupted"
            if child.returncode is None:
                try:
                    child.process.send_signal(interrupt)
                except ProcessLookupError:
                    pass
                await wait_exit(child, grace)
            seen.update(snapshot_tree(child))
            deadline = time.monotonic() + min(
                ORPHAN_GRACE_SECONDS, max(0.0, grace - (time.monotonic() - started))
            )
            while _alive(seen.values()) and time.monotonic() < deadline:
                await anyio.sleep(POLL_SECONDS)
            if _alive(seen.values()):
                stage = "killed"
                kill_deadline = time.monotonic() + kill_wait
                while True:
                    seen.update(snapshot_tree(child))
                    alive = _alive(seen.values())
                    if not alive or time.monotonic() >= kill_deadline:
                        break
                    _kill(alive)
                    reap_orphans()
                    await anyio.sleep(POLL_SECONDS)
        if child.returncode is None:
            await wait_exit(child, 0.5)
        reap_orphans()
        survivors = sorted(proc.pid for proc in _alive(seen.values()))
        receipt = ShutdownReceipt(
            stage=stage,
            elapsed_ms=round((time.monotonic() - started) * 1000, 2),
            pids=sorted(seen),
            survivors=survivors,
        )
        if survivors:
            log.error("processes survived the shutdown of pid %d: %s", child.pid, survivors)
        else:
            log.info("pid %d tree stopped: %s", child.pid, receipt.model_dump_json())
    return receipt


async def sweep_leftovers(child: ChildProcess) -> list[int]:
    """After the agent exited on its own, kill whatever of its tree it left behind."""
    with anyio.CancelScope(shield=True):
        leftovers = snapshot_tree(child)
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


def _holds_token(proc: psutil.Process, token: str) -> bool:
    try:
        with open(f"/proc/{proc.pid}/environ", "rb") as handle:
            return f"{RUN_TOKEN_ENV}={token}".encode() in handle.read()
    except OSError:
        return False


def _descendants_quick(child: ChildProcess) -> dict[int, psutil.Process] | None:
    """The child's live descendants without a /proc-wide scan, or None when that cannot be complete.

    As a child subreaper the bridge adopts every orphan of its trees (setsid and double-forked ones
    included): the child's descendants plus the adopted orphans holding its token are all of them.
    """
    if not _subreaper:
        return None
    found: dict[int, psutil.Process] = {}
    try:
        for proc in psutil.Process(child.pid).children(recursive=True):
            found[proc.pid] = proc
        for orphan in psutil.Process(os.getpid()).children(recursive=False):
            if orphan.pid in _spawned_pids or not _holds_token(orphan, child.token):
                continue
            found[orphan.pid] = orphan
            for proc in orphan.children(recursive=True):
                found[proc.pid] = proc
    except psutil.Error:
        return None
    return {pid: proc for pid, proc in found.items() if pid != child.pid and _is_alive(proc)}


async def stop_descendants(child: ChildProcess, *, grace: float = 0.0) -> ShutdownReceipt:
    """Kill every process of the child's tree except the child itself; wait up to 5 s for them.

    For a long-lived agent that stays: what its tools left behind (daemons, setsid children) goes,
    the agent does not. `grace` s after a SIGTERM before the SIGKILL. The receipt's survivors are
    checked, never assumed.
    """
    with anyio.CancelScope(shield=True):
        started = time.monotonic()
        quick = _descendants_quick(child)
        if quick is not None and not quick:
            reap_orphans()
            elapsed = round((time.monotonic() - started) * 1000, 2)
            return ShutdownReceipt(stage="exited", elapsed_ms=elapsed, pids=[], survivors=[])
        seen = {pid: proc for pid, proc in snapshot_tree(child).items() if pid != child.pid}
        stage: ShutdownStage = "exited"
        if seen and grace > 0:
            stage = "interrupted"
            for proc in seen.values():
                try:
                    proc.terminate()
                except psutil.Error:
                    pass
            deadline = time.monotonic() + grace
            while _alive(seen.values()) and time.monotonic() < deadline:
                await anyio.sleep(POLL_SECONDS)
        if _alive(seen.values()):
            stage = "killed"
            kill_deadline = time.monotonic() + KILL_WAIT_SECONDS
            while True:
                more = {pid: proc for pid, proc in snapshot_tree(child).items() if pid != child.pid}
                seen.update(more)
                alive = _alive(seen.values())
                if not alive or time.monotonic() >= kill_deadline:
                    break
                _kill(alive)
                reap_orphans()
                await anyio.sleep(POLL_SECONDS)
        reap_orphans()
        survivors = sorted(proc.pid for proc in _alive(seen.values()))
        if survivors:
            log.error("descendants of pid %d survived: %s", child.pid, survivors)
    return ShutdownReceipt(
        stage=stage,
        elapsed_ms=round((time.monotonic() - started) * 1000, 2),
        pids=sorted(seen),
        survivors=survivors,
    )
