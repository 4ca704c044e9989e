"""The conversation registry: sessionId -> the live agent (one long-lived process in its agent's
live mode, such as pi's rpc mode) serving it.

Like a connection pool: a run leases its conversation (a second run of a busy conversation waits
in line), checks the live agent out for each attempt, and returns or invalidates it. Rules:
- a live agent serves one conversation; a change of tools, cwd, command, environment, project
  trust or MCP servers respawns it on the same session, a change of provider, model or thinking
  is a command, not a respawn;
- a closed, evicted or crashed agent is replaced by one that resumes the session file;
- at most `max_live` live agents at once (the spare aside). A conversation that needs one when
  they are all busy waits for a slot, first come first served; when one is needed and none is
  free, the least recently used idle agent is closed. A busy agent, or one checked out for a run
  that has not prompted it yet, is never closed to make room;
- idle agents close after `idle_seconds`;
- after `initialized` one agent is pre-spawned with the server defaults (the spare), so the
  first prompt of a new conversation, or of a resumed one (pi's `switch_session`), costs no
  spawn; when it is taken the next one is primed in the background. pi writes a session file
  only with the first prompt, so an unused spare leaves no empty session behind;
- every agent is stopped through the three-stage shutdown; nothing outlives `close`, not even
  one whose start was under way when it began.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

import anyio
import anyio.abc
import anyio.to_thread
import psutil

from bridge.agents.seam import LiveClient, LiveMode
from bridge.agents.values import LaunchSpec, LiveError, LiveState, OpenedConversation, RunOptions
from bridge.contract import ErrorInfo, LiveConversation, ShutdownReceipt
from bridge.engines.cancel import CancelToken
from bridge.process.shutdown import shutdown_tree, wait_exit
from bridge.process.spawn import ChildProcess, SpawnError, forget, spawn

log = logging.getLogger(__name__)

# A spare is primed this long after the run that took the last one ended: a Node start-up takes
# a core for a while, which a run streaming meanwhile would feel.
SPARE_PRIME_DELAY_SECONDS: Final = 0.5
REAP_INTERVAL_SECONDS: Final = 1.0
# After a conversation is opened ahead of its first prompt (ACP's session/new), the next spare
# waits this long: that first prompt usually comes within seconds.
OPENED_SPARE_PRIME_DELAY_SECONDS: Final = 3.0
# A run never waits longer for a starting spare than a spawn of its own would take.
SPARE_WAIT_SECONDS: Final = 5.0
# Sessions opened here whose file pi has not written yet: a bound, so a client opening session
# after session never grows the set without end.
MAX_OPENED_SESSIONS: Final = 4096

LiveKey = tuple[tuple[str, ...], str, tuple[str, ...] | None, frozenset[tuple[str, str]], bool, str | None]


class NoRpc(Exception):
    """The agent command does not speak its live mode (it said so, or never answered at all)."""


class StartFailure(Exception):
    """A live agent could not be started or configured; carries the error for the attempt."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class CheckoutCancelled(Exception):
    """The run was cancelled while its live agent was being found, started or configured."""


class Launcher(Protocol):
    """What the registry needs from the agent seam to run a live agent."""

    display_name: str

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo: ...

    def live_mode(self) -> LiveMode | None: ...


def canonical_cwd(cwd: str) -> str:
    """One spelling per folder: no trailing slash, symlinks resolved (as the agent's getcwd sees it)."""
    return os.path.realpath(cwd)


def live_key(command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]) -> LiveKey:
    """What must be identical for a live agent to take a run (anything else is a command): the
    project trust it was started with among them, since an agent loads its project files once,
    and its MCP servers, whose file is named by their whole content, so a process started for one
    set never serves another."""
    key = (command, canonical_cwd(options.cwd), options.tools, frozenset(env.items()))
    return (*key, options.trusted, options.mcp_config)


@dataclass(eq=False)
class LiveAgent:
    """One long-lived agent process and what the registry knows of it."""

    key: LiveKey
    child: ChildProcess
    rpc: LiveClient
    cwd: str
    session_id: str | None = None
    session_file: str | None = None
    history: bool = False
    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    busy: bool = False
    # Attempts it has been checked out for (the log says what an agent closed to make room served).
    checkouts: int = 0
    last_used: float = field(default_factory=time.monotonic)
    scope: anyio.CancelScope | None = None
    stopped: ShutdownReceipt | None = None
    # Two stops of one agent (a shutdown sweep and its own cancelled start) share one shutdown.
    stop_lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.child.pid

    @property
    def alive(self) -> bool:
        """Whether it can still take a prompt."""
        if self.child.returncode is not None or self.rpc.closed.is_set():
            return False
        exited = self.child.has_exited()  # killed a moment ago, its exit not collected yet
        if exited is not None:
            return not exited
        try:  # no pidfd: a zombie is what such a process looks like in /proc
            return bool(psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def take_state(self, state: LiveState, fallback_session: str | None) -> None:
        """What the agent reports of itself: its session, model, thinking and history."""
        self.session_id = state.session_id if state.session_id is not None else fallback_session
        self.session_file = state.session_file
        # What it runs now: a run naming only a model keeps its provider, and a first prompt
        # asking for the thinking level it runs sends nothing.
        self.provider = state.provider if state.provider is not None else self.provider
        self.model = state.model if state.model is not None else self.model
        self.thinking = state.thinking if state.thinking is not None else self.thinking
        self.history = state.message_count is not None and state.message_count > 0

    async def configure(self, options: RunOptions) -> None:
        """Provider, model and thinking of this run, by command, only where they change."""
        provider = options.provider or self.provider
        if provider and options.model and (provider, options.model) != (self.provider, self.model):
            await self.rpc.set_model(provider, options.model)
            self.provider, self.model = provider, options.model
        if options.thinking and options.thinking != self.thinking:
            await self.rpc.set_thinking(options.thinking)
            self.thinking = options.thinking


@dataclass(eq=False)
class Lease:
    """A run's hold on its conversation: one run at a time per session."""

    session_id: str | None
    lock: anyio.Lock | None = None
    live: LiveAgent | None = None
    # (session file, its mark before the last failed prompt): a retry cuts the file back to it
    trim: tuple[str, int | None] | None = None
    used_rpc: bool = False
    # A live slot reserved for the agent this lease is starting (or restarting).
    holds_slot: bool = False


@dataclass(eq=False)
class _SlotWaiter:
    """A conversation waiting for a live slot, in line."""

    granted: anyio.Event = field(default_factory=anyio.Event)


class Conversations:
    """The live agents of the conversations, their spare, and the locks of busy sessions."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        max_live: int = 4,
        idle_seconds: float = 600.0,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.launcher = launcher
        self.name = launcher.display_name
        self.live = launcher.live_mode()
        self.max_live = max_live
        self.idle_seconds = idle_seconds
        self.wait_writable = wait_writable
        self.supported: bool | None = None
        self._fallback_logged = False
        self._live: dict[str, LiveAgent] = {}
        self._starting: set[LiveAgent] = set()  # spawned, not yet answering: no one else holds them
        # Live slots reserved by leases whose agent is starting; with `_live`, never above max_live.
        self._reserved = 0
        self._slot_waiters: deque[_SlotWaiter] = deque()
        self._spare: LiveAgent | None = None
        self._spare_pending = False
        self._spare_ready = anyio.Event()
        self._spare_spawning = False
        self._spare_launch: tuple[tuple[str, ...], RunOptions, dict[str, str]] | None = None
        #: Whether a folder's project trust still holds now (runs/project_trust.py; blocking): a
        #: spare primed like a trusted run is started untrusted once the folder's config changed
        #: since the user trusted it, since an agent loads that config as it starts.
        self.trust_holds: Callable[[str], bool] | None = None
        self._locks: dict[str, anyio.Lock] = {}
        # Sessions a live agent of this bridge opened and pi may not have written yet: only those
        # may be started anew under their id (any other unknown id is the client's error).
        self._opened: OrderedDict[str, None] = OrderedDict()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._closing = False

    @property
    def mode(self) -> LiveMode:
        """The agent's live mode; raises NoRpc when it has none."""
        if self.live is None:
            raise NoRpc(f"{self.name} has no live mode")
        return self.live

    # ------------------------------------------------------------------ lifetime

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the live agents' reader tasks and the idle reaper until `close`."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            task_status.started()
            while True:
                await anyio.sleep(REAP_INTERVAL_SECONDS)
                await self._reap_idle()

    async def close(self) -> None:
        """End the registry's tasks, then stop every live agent (three-stage, shielded)."""
        with anyio.CancelScope(shield=True):
            self._closing = True
            self._spare_launch = None
            # Tasks first: an agent still starting (a spare) then stops itself instead of landing
            # after the sweep below.
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                self._tasks = None
            while agents := [
                *self._live.values(),
                *([self._spare] if self._spare else []),
                *(a for a in self._starting if a.stopped is None),
            ]:
                self._live.clear()
                self._spare = None
                for agent in agents:
                    await self.stop(agent)

    def note_fallback(self, command: tuple[str, ...], reason: str) -> None:
        """The command does not speak rpc: every later run uses the json engine (logged once)."""
        self.supported = False
        if not self._fallback_logged:
            self._fallback_logged = True
            log.warning(
                "%s does not speak its rpc mode (%s); running each prompt on the json engine instead",
                " ".join(command),
                reason,
            )

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
        if not await _until(lock.acquire(), cancel):
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
        self._return_slot(lease)
        if lease.lock is not None and lease.lock.locked():
            lease.lock.release()
        if lease.session_id is not None:
            lock = self._locks.get(lease.session_id)
            if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
                del self._locks[lease.session_id]

    # ------------------------------------------------------------------ live slots

    def _slot_free(self) -> bool:
        return len(self._live) + self._reserved < self.max_live

    def _idle_victim(self) -> LiveAgent | None:
        """The least recently used idle agent, the one to close when a slot is needed."""
        idle = [agent for agent in self._live.values() if not agent.busy]
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
        self._drop(victim)
        self._stop_later(victim)
        return True

    async def _reserve_slot(
        self, lease: Lease, cancel: CancelToken | None, on_wait: Callable[[], None]
    ) -> bool:
        """A live slot for the agent `lease` is about to start; waits in line while every live
        agent is busy. False when the run was cancelled first."""
        if lease.holds_slot:
            return True
        if not self._slot_waiters and (self._slot_free() or self._make_room()):
            self._reserved += 1
            lease.holds_slot = True
            return True
        waiter = _SlotWaiter()
        self._slot_waiters.append(waiter)
        log.info("a conversation waits for a live slot (%d in line)", len(self._slot_waiters))
        on_wait()
        try:
            granted = await _until(waiter.granted.wait(), cancel)
        finally:
            if waiter.granted.is_set():
                lease.holds_slot = True  # granted: the slot is the lease's to return, whatever comes
            else:
                self._slot_waiters.remove(waiter)
        if not granted:
            self._return_slot(lease)
            return False
        return True

    def _return_slot(self, lease: Lease) -> None:
        if lease.holds_slot:
            lease.holds_slot = False
            self._reserved -= 1
            self._grant_slots()

    def _grant_slots(self) -> None:
        """Hand free slots (closing idle agents where needed) to the waiters, oldest first."""
        while self._slot_waiters and not self._closing and (self._slot_free() or self._make_room()):
            waiter = self._slot_waiters.popleft()
            self._reserved += 1
            waiter.granted.set()

    async def _enter(self, agent: LiveAgent, lease: Lease) -> None:
        """A started agent takes its conversation's place, and the slot its lease reserved.

        Another agent of the same session (one opened for it meanwhile) makes way when idle; a
        busy one keeps its place, and this one is stopped (StartFailure)."""
        assert agent.session_id is not None
        previous = self._live.get(agent.session_id)
        if previous is not None and previous is not agent:
            if previous.busy:
                await self.stop(agent)
                raise StartFailure(
                    ErrorInfo(
                        kind="busy",
                        message=f"session {agent.session_id} has a live agent serving another run",
                        retryable=True,
                    )
                )
            self._drop(previous)
            self._stop_later(previous)
        self._live[agent.session_id] = agent
        if not agent.history:  # a new session: pi writes it only with its first prompt
            self._opened_add(agent.session_id)
        if lease.holds_slot:
            lease.holds_slot = False
            self._reserved -= 1

    # ------------------------------------------------------------------ agents

    async def resolve_session(self, options: RunOptions, env: Mapping[str, str]) -> str | None:
        """The session a run continues: its sessionId, or the newest of its cwd for continueSession
        (a glob of its folder: off the event loop)."""
        if options.session_id:
            return options.session_id
        if options.continue_session:
            return await anyio.to_thread.run_sync(self.mode.latest_session_id, options.cwd, env)
        return None

    def known_session(self, session_id: str) -> str | None:
        """The full id of a conversation of this registry that `session_id` names exactly or by a
        unique prefix (one whose file pi may not have written yet); None if none does."""
        if session_id in self._live or session_id in self._opened:
            return session_id
        found = {sid for sid in (*self._live, *self._opened) if sid.startswith(session_id)}
        return found.pop() if len(found) == 1 else None

    def _opened_add(self, session_id: str) -> None:
        self._opened[session_id] = None
        self._opened.move_to_end(session_id)
        while len(self._opened) > MAX_OPENED_SESSIONS:
            self._opened.popitem(last=False)

    async def checkout(
        self,
        command: tuple[str, ...],
        options: RunOptions,
        env: Mapping[str, str],
        lease: Lease,
        *,
        retrying: bool,
        cancel: CancelToken | None = None,
        on_wait: Callable[[], None] = lambda: None,
    ) -> LiveAgent:
        """The live agent for this attempt of the leased conversation, started if need be.

        Raises NoRpc, StartFailure with the attempt's error, or CheckoutCancelled.
        """
        key = live_key(command, options, env)
        session_id = lease.session_id
        agent = self._live.get(session_id) if session_id else lease.live
        if agent is not None and agent.busy and agent is not lease.live:
            raise StartFailure(
                ErrorInfo(
                    kind="busy",
                    message=f"the live agent of session {session_id} is serving another run",
                    retryable=True,
                )
            )
        if agent is not None and (not agent.alive or agent.key != key or (retrying and lease.trim)):
            await self.invalidate(agent, keep_slot_for=lease)
            agent = None
        if agent is None and retrying and lease.trim is not None:
            path, mark = lease.trim
            await anyio.to_thread.run_sync(self.mode.cut_session_back, path, mark)
            log.info("session %s cut back before the retried prompt", session_id)
        lease.trim = None
        if agent is None:
            if not await self._reserve_slot(lease, cancel, on_wait):
                raise CheckoutCancelled
            agent = await self._spare_or_start(command, options, env, key, session_id)
            await self._enter(agent, lease)
        agent.busy = True
        agent.checkouts += 1
        agent.last_used = time.monotonic()
        lease.live = agent
        lease.used_rpc = True
        if agent.session_id:
            self.bind(lease, agent.session_id)
        return agent

    async def _spare_or_start(
        self,
        command: tuple[str, ...],
        options: RunOptions,
        env: Mapping[str, str],
        key: LiveKey,
        session_id: str | None,
    ) -> LiveAgent:
        """The spare, when it can serve this conversation, else a new agent; with a session id."""
        await self._await_spare(key)
        agent = await self._take_spare_for(key, session_id, env)
        if agent is None:
            if session_id is None:
                self._retarget_spare(command, options, env)
            agent = await self._start(command, options, env, key, session_id)
        if agent.session_id is None:
            await self.stop(agent)
            raise StartFailure(
                ErrorInfo(
                    kind="session",
                    message=f"the live {self.name} did not report a session id",
                    retryable=True,
                )
            )
        return agent

    async def open(
        self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]
    ) -> OpenedConversation:
        """A live agent for a conversation before its first prompt, so its id is known at once.

        `options.session_id` set: the conversation resumes that session (its live agent if it has
        one); unset: a new conversation, on the spare when it fits (no spawn). Raises NoRpc or
        StartFailure.
        """
        key = live_key(command, options, env)
        agent = self._live.get(options.session_id) if options.session_id else None
        if agent is not None and not agent.busy and (not agent.alive or agent.key != key):
            await self.invalidate(agent)
            agent = None
        if agent is None:
            slot = Lease(session_id=None)
            await self._reserve_slot(slot, None, lambda: None)
            try:
                agent = await self._spare_or_start(command, options, env, key, options.session_id)
                await self._enter(agent, slot)
            finally:
                self._return_slot(slot)
            if options.session_id is None and self._spare_launch is not None:
                # the next spare serves a next new conversation, rarer than this one's first
                # prompt, which a Node start-up meanwhile would slow down
                self.prime(*self._spare_launch, delay=OPENED_SPARE_PRIME_DELAY_SECONDS)
        agent.last_used = time.monotonic()
        try:
            models = await agent.rpc.available_models()
            levels = await agent.rpc.thinking_levels()
        except LiveError as exc:
            log.info("live agent pid %d: could not list its models: %s", agent.pid, exc)
            models, levels = (), []
        assert agent.session_id is not None
        return OpenedConversation(
            session_id=agent.session_id,
            provider=agent.provider,
            model=agent.model,
            thinking=agent.thinking,
            models=models,
            thinking_levels=tuple(levels),
        )

    def checkin(self, agent: LiveAgent) -> None:
        """An attempt is done with the agent; it stays for the conversation's next prompt (or
        makes room for a conversation waiting for a slot)."""
        agent.busy = False
        agent.last_used = time.monotonic()
        agent.history = True
        sid, path = agent.session_id, agent.session_file
        if sid is not None and sid in self._opened and path and os.path.exists(path):
            del self._opened[sid]  # stored now: a restart resumes it like any other
        self._grant_slots()

    async def invalidate(self, agent: LiveAgent, *, keep_slot_for: Lease | None = None) -> None:
        """The agent is gone or must go: forget it and stop its tree (idempotent). With
        `keep_slot_for`, the lease keeps its slot for the agent that replaces this one."""
        if keep_slot_for is not None and self._live.get(agent.session_id or "") is agent:
            self._live.pop(agent.session_id or "")
            if not keep_slot_for.holds_slot:
                keep_slot_for.holds_slot = True
                self._reserved += 1
        else:
            self._forget(agent)
        await self.stop(agent)

    async def close_session(self, session_id: str) -> bool:
        """Stop the conversation's idle live agent; False if it has none (a busy one is the
        caller's to cancel first)."""
        agent = self._live.get(session_id)
        if agent is None:
            return False
        self._forget(agent)
        await self.stop(agent)
        return True

    def rebind(self, agent: LiveAgent, state: LiveState) -> None:
        """The agent started a new session in its process (`/new`): it serves that one now, and
        the old one, stored, resumes like any other."""
        if agent.session_id is not None and self._live.get(agent.session_id) is agent:
            del self._live[agent.session_id]
        agent.take_state(state, None)
        if agent.session_id is not None:
            self._live[agent.session_id] = agent

    def live_agent(self, session_id: str) -> LiveAgent | None:
        """The conversation's live agent, if it has one."""
        return self._live.get(session_id)

    def listing(self) -> list[LiveConversation]:
        """The live conversations, for pi/runs."""
        return [
            LiveConversation(session_id=sid, pid=agent.pid, busy=agent.busy, cwd=agent.cwd)
            for sid, agent in self._live.items()
            if agent.alive
        ]

    def spare_pids(self) -> list[int]:
        """The pre-spawned agent, idle on purpose (listed with the warm pool's)."""
        return [self._spare.pid] if self._spare is not None and self._spare.alive else []

    def rss_bytes(self) -> int:
        """Resident memory of the spare and the idle live agents, with their descendants."""
        total = 0
        for pid in [*self.spare_pids(), *(a.pid for a in self._live.values() if not a.busy)]:
            try:
                proc = psutil.Process(pid)
                total += proc.memory_info().rss
                total += sum(child.memory_info().rss for child in proc.children(recursive=True))
            except psutil.Error:
                continue
        return total

    # ------------------------------------------------------------------ the spare

    def prime(
        self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str], *, delay: float = 0.0
    ) -> None:
        """Pre-spawn one agent for the next new conversation with these defaults (background)."""
        if self._closing:
            return
        self._spare_launch = (command, options, dict(env))
        if self._tasks is None or self.supported is False or self._spare is not None or self._spare_pending:
            return
        self._spare_pending = True
        self._tasks.start_soon(self._prime_spare, delay)

    def _retarget_spare(self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]) -> None:
        """A new conversation the spare could not serve (another cwd, tools or agent command):
        the next spare is primed like it, since the next new conversation most likely is too.
        (Priming the old launch again would spawn a pi that the next run stops unused.)"""
        if self._spare_launch is None:
            return  # priming is off, or the registry is closing
        spare_options = RunOptions(
            prompt="",
            cwd=options.cwd,
            provider=options.provider,
            model=options.model,
            thinking=options.thinking,
            tools=options.tools,
            trusted=options.trusted,
            mcp_servers=options.mcp_servers,
            mcp_config=options.mcp_config,
        )
        self._spare_launch = (command, spare_options, dict(env))

    def prime_again(self) -> None:
        """A run took the spare or ended: prime the next one like the last, after a short wait."""
        if self._spare_launch is not None:
            command, options, env = self._spare_launch
            self.prime(command, options, env, delay=SPARE_PRIME_DELAY_SECONDS)

    async def _await_spare(self, key: LiveKey) -> None:
        """A spare like this run needs is starting: waiting for it is never slower than a spawn."""
        launch = self._spare_launch
        if not self._spare_spawning or launch is None or live_key(*launch) != key:
            return
        with anyio.move_on_after(SPARE_WAIT_SECONDS):
            await self._spare_ready.wait()

    async def _prime_spare(self, delay: float) -> None:
        self._spare_ready = anyio.Event()
        retargeted = False
        try:
            if delay:
                await anyio.sleep(delay)
            if self._spare_launch is None or self._spare is not None:
                return
            self._spare_spawning = True
            command, options, env = self._spare_launch
            holds = self.trust_holds
            if (
                options.trusted
                and holds is not None
                and not await anyio.to_thread.run_sync(holds, options.cwd)
            ):
                options = replace(options, trusted=False)
            key = live_key(command, options, env)
            try:
                spare = await self._start(command, options, env, key, None)
            except NoRpc as exc:
                self.note_fallback(command, str(exc))
                return
            except StartFailure as exc:
                log.info("could not pre-spawn a live agent: %s", exc)
                return
            retargeted = self._spare_launch is not None and live_key(*self._spare_launch) != key
            if not retargeted:
                self._spare = spare
            else:
                # A new conversation elsewhere retargeted the spare while this one started.
                self._stop_later(spare)
        finally:
            self._spare_pending = self._spare_spawning = False
            self._spare_ready.set()
        if retargeted:
            self.prime_again()

    async def _take_spare_for(
        self, key: LiveKey, session_id: str | None, env: Mapping[str, str]
    ) -> LiveAgent | None:
        """The spare, if it fits: a new conversation takes it as it is; a resumed one whose
        session pi has stored loads that session into it. None: it does not fit (it is stopped
        when it cannot serve anyone any more)."""
        spare = self._spare
        if spare is None:
            return None
        if spare.key != key or not spare.alive:
            self._spare = None
            self._stop_later(spare)
            return None
        if session_id is None:
            self._spare = None
            log.info("live agent: took the spare (pid %d)", spare.pid)
            return spare
        cwd = canonical_cwd(spare.cwd)
        path = await anyio.to_thread.run_sync(self.mode.session_file, session_id, cwd, env)
        if path is None or self._spare is not spare:
            return None  # not stored yet (started anew under its id), or taken meanwhile
        self._spare = None
        try:
            state = await spare.rpc.switch_session(path)
        except LiveError as exc:
            log.info("the spare could not load session %s: %s", session_id, exc)
            self._stop_later(spare)
            return None
        spare.take_state(state, session_id)
        if spare.session_id != session_id:
            log.info("the spare loaded session %s as %s: not used", session_id, spare.session_id)
            self._stop_later(spare)
            return None
        log.info("live agent: the spare (pid %d) took resumed session %s", spare.pid, session_id)
        return spare

    # ------------------------------------------------------------------ starting and stopping

    async def _start(
        self,
        command: tuple[str, ...],
        options: RunOptions,
        env: Mapping[str, str],
        key: LiveKey,
        session_id: str | None,
    ) -> LiveAgent:
        if self._closing or self._tasks is None:
            raise StartFailure(
                ErrorInfo(kind="internal", message="the bridge is shutting down", retryable=False)
            )
        mode = self.mode
        launch_options = replace(options, session_id=session_id, continue_session=False)
        stored = session_id is not None and await anyio.to_thread.run_sync(
            mode.session_stored, session_id, options.cwd, env
        )
        if session_id in self._opened and not stored:
            # pi had not written the session yet (its first prompt failed, was cancelled or pi
            # died first): start it anew under the same id, so the conversation keeps its id.
            spec: LaunchSpec = mode.launch_spec(
                command, replace(launch_options, session_id=None), new_session_id=session_id
            )
        else:
            spec = mode.launch_spec(command, launch_options)
        try:
            child = await spawn(spec.argv, spec.cwd, {**env, **spec.env})
        except SpawnError as exc:
            raise StartFailure(self.launcher.spawn_failure(command, str(exc))) from exc
        rpc = mode.client(child, wait_writable=self.wait_writable)
        agent = LiveAgent(
            key=key,
            child=child,
            rpc=rpc,
            cwd=options.cwd,
            provider=options.provider,
            model=options.model,
            thinking=options.thinking,
        )
        self._starting.add(agent)
        try:
            if self._closing or self._tasks is None:
                # close() began while it spawned: it is stopped here, since its sweep is over
                raise StartFailure(
                    ErrorInfo(kind="internal", message="the bridge is shutting down", retryable=False)
                )
            self._tasks.start_soon(self._watch, agent)
            state = await agent.rpc.prepare()
        except LiveError as exc:
            await self._start_failed(agent, mode, exc)
            raise AssertionError("unreachable") from exc
        except BaseException:
            # Cancelled while pi started (a spare primed just as the bridge stops, a run
            # cancelled in its checkout): nobody holds this agent yet, so stop it here.
            await self.stop(agent)
            raise
        finally:
            self._starting.discard(agent)
        self.supported = True
        agent.take_state(state, session_id)
        log.info("live agent pid %d up for session %s", child.pid, agent.session_id)
        return agent

    async def _start_failed(self, agent: LiveAgent, mode: LiveMode, exc: LiveError) -> None:
        if exc.kind == "closed":
            await wait_exit(agent.child, 3.0)
        code = agent.child.returncode
        await self.stop(agent)
        stderr = agent.rpc.stderr.text()
        signal_name = None
        if code is not None and code < 0:
            signal_name = f"signal {-code}"
            code = None
        if exc.kind == "closed" and mode.lacks_live_mode(stderr):
            raise NoRpc(f"it exited (code {code}) saying so: {' '.join(stderr.split())[-200:]}") from exc
        if (
            exc.kind == "timeout"
            and self.supported is not True
            and agent.rpc.lines_read == 0
            and mode.silence_may_mean_no_live_mode()
        ):
            # Alive, silent, never answering: an agent that reads stdin for something else
            raise NoRpc(f"it never answered its first command ({exc})") from exc
        kind, retryable = mode.classify_exit(code, signal_name, stderr)
        if exc.kind == "timeout":
            message = f"the live {self.name} did not answer: {exc}"
            raise StartFailure(
                ErrorInfo(kind="stalled", message=message, retryable=True, stderr=stderr or None)
            )
        tail = " ".join(stderr.split())[-300:]
        message = f"the live {self.name} could not start: {exc}" + (f": {tail}" if tail else "")
        raise StartFailure(
            ErrorInfo(kind=kind, message=message, retryable=retryable, exit_code=code, stderr=stderr or None)
        )

    async def _watch(self, agent: LiveAgent) -> None:
        """Read the agent's output; when it closes while idle, forget and stop it (a crash between
        runs is noticed here; the conversation's next run resumes it from its file). A bug in
        reading one agent stops that agent only: its run sees it close, the other conversations
        and the registry go on."""
        with anyio.CancelScope() as scope:
            agent.scope = scope
            try:
                await agent.rpc.serve()
            except Exception:
                log.exception("the reader of live agent pid %d failed; the agent is stopped", agent.pid)
                self._forget(agent)
                await self.stop(agent)
                return
            if not agent.busy:
                said = " ".join(agent.rpc.stderr.text().split())[-300:]
                log.warning(
                    "live agent pid %d of session %s closed its output%s",
                    agent.pid,
                    agent.session_id,
                    f", saying: {said}" if said else "",
                )
                self._forget(agent)
                await self.stop(agent)

    def _drop(self, agent: LiveAgent) -> None:
        """Take the agent out of the registry without handing its slot on."""
        if agent.session_id and self._live.get(agent.session_id) is agent:
            del self._live[agent.session_id]
        if self._spare is agent:
            self._spare = None

    def _forget(self, agent: LiveAgent) -> None:
        """Take the agent out of the registry; a conversation waiting for a slot gets its own."""
        self._drop(agent)
        self._grant_slots()

    def _stop_later(self, agent: LiveAgent) -> None:
        """Stop an agent nobody holds, in the background (now, if the registry no longer serves)."""
        if self._tasks is not None:
            self._tasks.start_soon(self.stop, agent)
        else:
            self._starting.add(agent)  # close() stops what is left here

    async def stop(self, agent: LiveAgent) -> ShutdownReceipt:
        """Three-stage stop of the agent's whole tree: stdin EOF and SIGTERM, 2 s, then kill."""
        with anyio.CancelScope(shield=True):
            async with agent.stop_lock:
                if agent.stopped is not None:
                    return agent.stopped
                agent.rpc.close_stdin()
                receipt = await shutdown_tree(agent.child)
                agent.stopped = receipt
                forget(agent.child)
                if agent.scope is not None:
                    agent.scope.cancel()
        return receipt

    async def _reap_idle(self) -> None:
        now = time.monotonic()
        for agent in list(self._live.values()):
            if not agent.busy and now - agent.last_used >= self.idle_seconds:
                log.info(
                    "live agent of session %s idle for %.0f s: closed",
                    agent.session_id,
                    now - agent.last_used,
                )
                self._forget(agent)
                await self.stop(agent)


async def _until(waiting: Awaitable[object], cancel: CancelToken | None) -> bool:
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
