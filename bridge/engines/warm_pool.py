"""The warm pool: a pre-spawned agent, started with the next run's exact launch, waiting on stdin
(the very process a cold run would start, only earlier)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.abc
import psutil

from bridge.agents.values import LaunchSpec
from bridge.process.shutdown import shutdown_tree
from bridge.process.spawn import ChildProcess, forget, spawn

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS: Final = 300.0
MAX_ENTRIES: Final = 2

PoolKey = tuple[tuple[str, ...], str, frozenset[tuple[str, str]]]


def pool_key(spec: LaunchSpec, extra_env: Mapping[str, str]) -> PoolKey:
    """What must be identical for a warm process to stand in for a cold spawn."""
    env = {**extra_env, **spec.env}
    return (spec.argv, spec.cwd, frozenset(env.items()))


def tree_rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes and their descendants (one gone meanwhile counts 0)."""
    total = 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            total += proc.memory_info().rss
            total += sum(child.memory_info().rss for child in proc.children(recursive=True))
        except psutil.Error:
            continue
    return total


@dataclass(slots=True)
class WarmEntry:
    """One idle pre-spawned agent."""

    key: PoolKey
    child: ChildProcess
    session: str | None
    spawned_at: float = field(default_factory=time.monotonic)
    day: str = field(default_factory=lambda: time.strftime("%Y-%m-%d"))
    idle: anyio.CancelScope | None = None


class WarmPool:
    """Idle pre-spawned agents keyed by their launch; owned by the run registry's task group."""

    def __init__(
        self, *, enabled: bool = True, ttl: float = DEFAULT_TTL_SECONDS, max_entries: int = MAX_ENTRIES
    ) -> None:
        self.enabled = enabled
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: list[WarmEntry] = []
        self._pending: set[PoolKey] = set()
        self._waiting: set[anyio.CancelScope] = set()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._live_sessions: Counter[str] = Counter()
        self._session_epochs: Counter[str] = Counter()
        self.hits = 0
        self.misses = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the pool's background tasks until `close`."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            task_status.started()
            await anyio.sleep_forever()

    def take(self, spec: LaunchSpec, extra_env: Mapping[str, str]) -> ChildProcess | None:
        """An idle agent launched exactly like `spec`, removed from the pool; None if there is none."""
        if not self.enabled:
            return None
        key = pool_key(spec, extra_env)
        for entry in list(self._entries):
            if entry.key != key:
                continue
            self._entries.remove(entry)
            if entry.idle is not None:
                entry.idle.cancel()
            if self._fresh(entry):
                self.hits += 1
                age = time.monotonic() - entry.spawned_at
                log.info("warm pool: hit (pid %d, %.0f s old)", entry.child.pid, age)
                return entry.child
            self._retire(entry)
        self.misses += 1
        return None

    def yield_to_run(self) -> None:
        """A run is starting: drop pre-spawns still waiting for their turn, so they do not load
        a Node runtime on the CPU the run needs (it primes again when it ends)."""
        for waiting in list(self._waiting):
            waiting.cancel()

    def forget_session(self, session: str | None) -> None:
        """A run of `session` starts: idle entries for it would open a stale copy; drop them."""
        if not session:
            return
        self._session_epochs[session] += 1  # a pre-spawn for it still on its way is stale too
        for entry in [e for e in self._entries if e.session == session]:
            self._entries.remove(entry)
            self._retire(entry)

    def session_in_use(self, session: str | None) -> None:
        """A run of `session` is live: nothing is primed for it until every such run ended.

        An idle entry for it stays, for this run's attempt to `take`; the attempt then drops the
        rest (`forget_session`). Pre-spawns still on their way are stale already.
        """
        if session:
            self._live_sessions[session] += 1
            self._session_epochs[session] += 1

    def session_released(self, session: str | None) -> None:
        """A run of `session` ended (call before priming for it)."""
        if session:
            self._live_sessions[session] -= 1
            if self._live_sessions[session] <= 0:
                del self._live_sessions[session]

    def prime(
        self, spec: LaunchSpec, extra_env: Mapping[str, str], session: str | None, *, delay: float = 0.0
    ) -> None:
        """Start one idle agent like `spec` in the background (after `delay` s), unless one is
        there or on its way already, or a run of `session` is live."""
        if not self.enabled or self._tasks is None or self._closed:
            return
        if session and self._live_sessions[session]:
            return
        key = pool_key(spec, extra_env)
        if key in self._pending or any(entry.key == key for entry in self._entries):
            return
        self._pending.add(key)
        # Only the launch is kept: the spec's stdin is the last prompt (up to the frame limit).
        launch = dataclasses.replace(spec, stdin=b"")
        epoch = self._session_epochs[session] if session else 0
        self._tasks.start_soon(self._spawn, launch, dict(extra_env), key, session, epoch, delay)

    def warm_pids(self) -> list[int]:
        """Pids of the idle entries (for pi/runs and memory accounting)."""
        return [entry.child.pid for entry in self._entries]

    def rss_bytes(self) -> int:
        """Resident memory of the idle entries and their descendants."""
        return tree_rss_bytes(self.warm_pids())

    async def close(self) -> None:
        """Stop every idle entry (three-stage, shielded), then end the pool's tasks."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            entries, self._entries = self._entries, []
            for entry in entries:
                await self._stop(entry)
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()
            self._tasks = None

    async def _spawn(
        self,
        spec: LaunchSpec,
        extra_env: dict[str, str],
        key: PoolKey,
        session: str | None,
        epoch: int,
        delay: float,
    ) -> None:
        try:
            if delay:
                with anyio.CancelScope() as waiting:
                    self._waiting.add(waiting)
                    await anyio.sleep(delay)
                self._waiting.discard(waiting)
                if waiting.cancel_called or self._closed:
                    return
            child = await spawn(spec.argv, spec.cwd, {**extra_env, **spec.env})
        except Exception as exc:  # a pre-spawn is an optimisation: it never takes the bridge down
            log.warning("warm pool: could not pre-spawn: %s", exc)
            return
        finally:
            self._pending.discard(key)
        entry = WarmEntry(key=key, child=child, session=session)
        try:
            if self._closed or (
                session and (self._live_sessions[session] or self._session_epochs[session] != epoch)
            ):
                return  # the pool closed, or a run of the session started, while it was spawning
            self._entries.append(entry)
            while len(self._entries) > self.max_entries:
                self._retire(self._entries.pop(0))
            # Expire on time even when no run comes to look; `take` ends this wait early.
            with anyio.move_on_after(self.ttl) as idle:
                entry.idle = idle
                await child.process.wait()
        finally:
            # However the wait ended (expiry, death, the pool's tasks cancelled at close), an
            # entry nobody took is stopped here; a taken one is the run's now.
            if entry.idle is None or entry in self._entries:
                if entry in self._entries:
                    self._entries.remove(entry)
                await self._stop(entry)

    def _fresh(self, entry: WarmEntry) -> bool:
        return (
            entry.child.returncode is None
            and time.monotonic() - entry.spawned_at < self.ttl
            and entry.day == time.strftime("%Y-%m-%d")
        )

    def _retire(self, entry: WarmEntry) -> None:
        if self._tasks is not None:
            self._tasks.start_soon(self._stop, entry)

    async def _stop(self, entry: WarmEntry) -> None:
        with anyio.CancelScope(shield=True):
            await shutdown_tree(entry.child)
            forget(entry.child)
