"""Leases and slots: one run at a time per conversation, and at most `max_live` live agents, the
least recently used idle one closed when a conversation needs room (a busy one never is)."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from bridge.agents.values import LiveState
from bridge.contract import LiveConversation
from bridge.engines.cancel import CancelToken
from bridge.engines.live.live_agent import Lease, LiveAgent, StartFailure
from bridge.engines.live.starts import Starter

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _SlotWaiter:
    """A conversation waiting for a live slot, in line."""

    granted: anyio.Event = field(default_factory=anyio.Event)


class Slots:
    """The conversations' live agents by session, their slots, and the locks of busy sessions."""

    def __init__(self, starter: Starter, live: dict[str, LiveAgent], *, max_live: int) -> None:
        self._starter = starter
        self.max_live = max_live
        self.live = live
        # Live slots reserved by leases whose agent is starting; with `live`, never above max_live.
        self._reserved = 0
        self._waiters: deque[_SlotWaiter] = deque()
        self._locks: dict[str, anyio.Lock] = {}

    # ------------------------------------------------------------------ leases

    async def lease(
        self, session_id: str | None, cancel: CancelToken, on_wait: Callable[[], None]
    ) -> Lease | None:
        """Hold the conversation for one run; waits while another run of it goes on.

        None when the run was cancelled while waiting.
        """
        if session_id is None:
            return Lease(session_id=None)
        lock = self._locks.setdefault(session_id, anyio.Lock())
        if not lock.locked():  # the usual case: nobody to wait for, no waiter task needed
            lock.acquire_nowait()
            return Lease(session_id=session_id, lock=lock)
        on_wait()
        if not await until(lock.acquire(), cancel):
            return None
        return Lease(session_id=session_id, lock=lock)

    def bind(self, lease: Lease, session_id: str) -> None:
        """A new conversation learned its id: later runs of it wait for this one."""
        if lease.session_id is not None:
            return
        lease.session_id = session_id
        lock = self._locks.setdefault(session_id, anyio.Lock())
        if not lock.locked():
            lock.acquire_nowait()
            lease.lock = lock

    def release(self, lease: Lease) -> None:
        """The run ended: its agent goes back, its slot and the conversation's lock are freed."""
        if lease.live is not None and lease.live.busy:
            self.checkin(lease.live)
        self.return_slot(lease)
        if lease.lock is not None and lease.lock.locked():
            lease.lock.release()
        if lease.session_id is not None:
            lock = self._locks.get(lease.session_id)
            if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
                del self._locks[lease.session_id]

    def checkin(self, agent: LiveAgent) -> None:
        """An attempt is done with the agent; it stays for the conversation's next prompt (or
        makes room for a conversation waiting for a slot)."""
        agent.busy = False
        agent.last_used = time.monotonic()
        agent.history = True
        sid, path = agent.session_id, agent.session_file
        opened = self._starter.opened
        if sid is not None and sid in opened and path and os.path.exists(path):
            del opened[sid]  # stored now: a restart resumes it like any other
        self.grant()

    # ------------------------------------------------------------------ slots

    def _slot_free(self) -> bool:
        return len(self.live) + self._reserved < self.max_live

    def _idle_victim(self) -> LiveAgent | None:
        """The least recently used idle agent, the one to close when a slot is needed."""
        idle = [agent for agent in self.live.values() if not agent.busy]
        return min(idle, key=lambda agent: agent.last_used, default=None)

    def _make_room(self) -> bool:
        """Close the least recently used idle agent (in the background); False: none is idle."""
        victim = self._idle_victim()
        if victim is None:
            return False
        log.info(
            "live agent pid %d of session %s (checked out %d times) closed to make room (%d live at most)",
            victim.pid,
            victim.session_id,
            victim.checkouts,
            self.max_live,
        )
        self.drop(victim)
        self._starter.stop_later(victim)
        return True

    async def reserve(self, lease: Lease, cancel: CancelToken | None, on_wait: Callable[[], None]) -> bool:
        """A live slot for the agent `lease` is about to start; waits in line while every live
        agent is busy. False when the run was cancelled first."""
        if lease.holds_slot:
            return True
        if not self._waiters and (self._slot_free() or self._make_room()):
            self._reserved += 1
            lease.holds_slot = True
            return True
        waiter = _SlotWaiter()
        self._waiters.append(waiter)
        log.info("a conversation waits for a live slot (%d in line)", len(self._waiters))
        on_wait()
        try:
            granted = await until(waiter.granted.wait(), cancel)
        finally:
            if waiter.granted.is_set():
                lease.holds_slot = True  # granted: the slot is the lease's to return, whatever comes
            else:
                self._waiters.remove(waiter)
        if not granted:
            self.return_slot(lease)
            return False
        return True

    def return_slot(self, lease: Lease) -> None:
        """The lease's reserved slot, if it holds one, goes to whoever waits for it."""
        if lease.holds_slot:
            lease.holds_slot = False
            self._reserved -= 1
            self.grant()

    def keep_slot(self, agent: LiveAgent, lease: Lease) -> bool:
        """`agent` leaves its conversation's place, and `lease` keeps the slot for the agent that
        replaces it; False when `agent` holds no place."""
        if self.live.get(agent.session_id or "") is not agent:
            return False
        self.live.pop(agent.session_id or "")
        if not lease.holds_slot:
            lease.holds_slot = True
            self._reserved += 1
        return True

    def grant(self) -> None:
        """Hand free slots (closing idle agents where needed) to the waiters, oldest first."""
        while self._waiters and not self._starter.closing and (self._slot_free() or self._make_room()):
            waiter = self._waiters.popleft()
            self._reserved += 1
            waiter.granted.set()

    async def enter(self, agent: LiveAgent, lease: Lease) -> None:
        """A started agent takes its conversation's place, and the slot its lease reserved.

        Another agent of the same session (one opened for it meanwhile) makes way when idle; a
        busy one keeps its place, and this one is stopped (StartFailure)."""
        assert agent.session_id is not None
        previous = self.live.get(agent.session_id)
        if previous is not None and previous is not agent:
            if previous.busy:
                await self._starter.stop(agent)
                message = f"session {agent.session_id} has a live agent serving another run"
                raise StartFailure.retryable("busy", message)
            self.drop(previous)
            self._starter.stop_later(previous)
        self.live[agent.session_id] = agent
        if not agent.history:  # a new session: pi writes it only with its first prompt
            self._starter.opened_add(agent.session_id)
        if lease.holds_slot:
            lease.holds_slot = False
            self._reserved -= 1

    def drop(self, agent: LiveAgent) -> None:
        """Take the agent out of its conversation's place without handing its slot on."""
        if agent.session_id and self.live.get(agent.session_id) is agent:
            del self.live[agent.session_id]

    # ------------------------------------------------------------------ the table

    def live_agent(self, session_id: str) -> LiveAgent | None:
        """The conversation's live agent, if it has one."""
        return self.live.get(session_id)

    def known_session(self, session_id: str) -> str | None:
        """The full id of a conversation of this registry that `session_id` names exactly or by a
        unique prefix (one whose file pi may not have written yet); None if none does."""
        opened = self._starter.opened
        if session_id in self.live or session_id in opened:
            return session_id
        found = {sid for sid in (*self.live, *opened) if sid.startswith(session_id)}
        return found.pop() if len(found) == 1 else None

    def rebind(self, agent: LiveAgent, state: LiveState) -> None:
        """The agent started a new session in its process (`/new`): it serves that one now, and
        the old one, stored, resumes like any other."""
        self.drop(agent)
        agent.take_state(state, None)
        if agent.session_id is not None:
            self.live[agent.session_id] = agent

    def listing(self) -> list[LiveConversation]:
        """The live conversations, for pi/runs."""
        return [
            LiveConversation(session_id=sid, pid=agent.pid, busy=agent.busy, cwd=agent.cwd)
            for sid, agent in self.live.items()
            if agent.alive
        ]


async def until(waiting: Awaitable[object], cancel: CancelToken | None) -> bool:
    """Await `waiting` unless `cancel` fires first; True when it finished."""
    if cancel is None:
        await waiting
        return True
    finished = False
    async with anyio.create_task_group() as tasks:

        async def give_up_on_cancel() -> None:
            await cancel.wait()
            tasks.cancel_scope.cancel()

        tasks.start_soon(give_up_on_cancel)
        await waiting
        finished = True
        tasks.cancel_scope.cancel()
    return finished
