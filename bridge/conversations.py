"""The conversation registry: sessionId -> the live agent (a long-lived pi in its rpc mode) serving it.

Like a connection pool: a run leases its conversation (a second run of a busy conversation waits
in line), checks the live agent out for each attempt, and returns or invalidates it. Rules:
- a live agent serves one conversation; a change of tools, cwd, command or environment respawns
  it on the same session, a change of provider, model or thinking is a command, not a respawn;
- a closed, evicted or crashed agent is replaced by one that resumes the session file;
- idle agents close after `idle_seconds`; beyond `max_live`, the least recently used idle one
  closes first;
- after `initialized` one agent is pre-spawned with the server defaults (the spare), so the
  first prompt of a new conversation costs no spawn; when it is taken the next one is primed in
  the background. pi writes a session file only with the first prompt, so an unused spare
  leaves no empty session behind;
- every agent is stopped through the three-stage shutdown; nothing outlives `close`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import psutil

from bridge.agent import LaunchSpec, RunOptions
from bridge.cancel import CancelToken
from bridge.contract import ErrorInfo, LiveConversation, ShutdownReceipt
from bridge.pi.errors import classify_exit
from bridge.pi.rpc import PiRpc, RpcError, latest_session_id, rpc_launch_spec, trim_session_file
from bridge.pi.sessions import session_exists
from bridge.process import ChildProcess, SpawnError, forget, shutdown_tree, spawn, wait_exit

log = logging.getLogger(__name__)

# A spare is primed this long after the run that took the last one ended: a Node start-up takes
# a core for ~0.4 s, which a run streaming meanwhile would feel.
SPARE_PRIME_DELAY_SECONDS: Final = 0.5
REAP_INTERVAL_SECONDS: Final = 1.0
# After a conversation is opened ahead of its first prompt (ACP's session/new), the next spare
# waits this long: that first prompt usually comes within seconds.
OPENED_SPARE_PRIME_DELAY_SECONDS: Final = 3.0
# A run never waits longer for a starting spare than a spawn of its own would take.
SPARE_WAIT_SECONDS: Final = 5.0

LiveKey = tuple[tuple[str, ...], str, tuple[str, ...] | None, frozenset[tuple[str, str]]]


class NoRpc(Exception):
    """The agent command does not speak its rpc mode (it exited before answering)."""


class StartFailure(Exception):
    """A live agent could not be started or configured; carries the error for the attempt."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class Launcher(Protocol):
    """What the registry needs from the agent seam to run a live agent."""

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo: ...


def live_key(command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]) -> LiveKey:
    """What must be identical for a live agent to take a run (anything else is a command)."""
    return (command, options.cwd, options.tools, frozenset(env.items()))


@dataclass(eq=False)
class LiveAgent:
    """One long-lived agent process and what the registry knows of it."""

    key: LiveKey
    child: ChildProcess
    rpc: PiRpc
    cwd: str
    session_id: str | None = None
    session_file: str | None = None
    history: bool = False
    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    busy: bool = False
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

    async def configure(self, options: RunOptions) -> None:
        """Provider, model and thinking of this run, by command, only where they change."""
        if options.model and (options.provider, options.model) != (self.provider, self.model):
            provider = options.provider or self.provider
            if provider:
                await self.rpc.set_model(provider, options.model)
                self.provider, self.model = provider, options.model
        if options.thinking and options.thinking != self.thinking:
            await self.rpc.set_thinking(options.thinking)
            self.thinking = options.thinking


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One model pi can run: its provider, id and display name."""

    provider: str
    model_id: str
    name: str


@dataclass(frozen=True, slots=True)
class OpenedConversation:
    """A conversation opened ahead of its first prompt: its id and what its agent can run."""

    session_id: str
    provider: str | None
    model: str | None
    thinking: str | None
    models: tuple[ModelChoice, ...]
    thinking_levels: tuple[str, ...]


@dataclass(eq=False)
class Lease:
    """A run's hold on its conversation: one run at a time per session."""

    session_id: str | None
    lock: anyio.Lock | None = None
    live: LiveAgent | None = None
    # (session file, its size before the last failed prompt): a retry cuts the file back to it
    trim: tuple[str, int | None] | None = None
    used_rpc: bool = False


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
        self.max_live = max_live
        self.idle_seconds = idle_seconds
        self.wait_writable = wait_writable
        self.supported: bool | None = None
        self._fallback_logged = False
        self._live: dict[str, LiveAgent] = {}
        self._orphans: list[LiveAgent] = []  # busy with a brand-new conversation, id not known yet
        self._starting: set[LiveAgent] = set()  # spawned, not yet answering: no one else holds them
        self._spare: LiveAgent | None = None
        self._spare_pending = False
        self._spare_ready = anyio.Event()
        self._spare_spawning = False
        self._spare_launch: tuple[tuple[str, ...], RunOptions, dict[str, str]] | None = None
        self._locks: dict[str, anyio.Lock] = {}
        # Sessions a live agent of this bridge opened: only those may be started anew under
        # their id when pi never wrote them (any other unknown id is the client's error).
        self._opened: set[str] = set()
        self._tasks: anyio.abc.TaskGroup | None = None

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
            self._spare_launch = None
            # Tasks first: an agent still starting (a spare) then stops itself instead of landing
            # after the sweep below.
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                self._tasks = None
            while agents := [
                *self._live.values(),
                *self._orphans,
                *([self._spare] if self._spare else []),
                *(a for a in self._starting if a.stopped is None),
            ]:
                self._live.clear()
                self._orphans.clear()
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
        acquired = False
        async with anyio.create_task_group() as tasks:

            async def give_up_on_cancel() -> None:
                await cancel.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(give_up_on_cancel)
            await lock.acquire()
            acquired = True
            tasks.cancel_scope.cancel()
        if not acquired:
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
        """The run ended: the next run of the conversation may start."""
        if lease.live is not None and lease.live.busy:
            self.checkin(lease.live)
        if lease.lock is not None and lease.lock.locked():
            lease.lock.release()
        if lease.session_id is not None:
            lock = self._locks.get(lease.session_id)
            if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
                del self._locks[lease.session_id]

    # ------------------------------------------------------------------ agents

    async def resolve_session(self, options: RunOptions, env: Mapping[str, str]) -> str | None:
        """The session a run continues: its sessionId, or the newest of its cwd for continueSession
        (a glob of its folder: off the event loop)."""
        if options.session_id:
            return options.session_id
        if options.continue_session:
            return await anyio.to_thread.run_sync(latest_session_id, options.cwd, env)
        return None

    async def checkout(
        self,
        command: tuple[str, ...],
        options: RunOptions,
        env: Mapping[str, str],
        lease: Lease,
        *,
        retrying: bool,
    ) -> LiveAgent:
        """The live agent for this attempt of the leased conversation, started if need be.

        Raises NoRpc, or StartFailure with the attempt's error.
        """
        key = live_key(command, options, env)
        session_id = lease.session_id
        agent = self._live.get(session_id) if session_id else lease.live
        if agent is not None and (not agent.alive or agent.key != key or (retrying and lease.trim)):
            self._forget(agent)
            await self.stop(agent)
            agent = None
        if agent is None and retrying and lease.trim is not None:
            path, size = lease.trim
            await anyio.to_thread.run_sync(trim_session_file, path, size)
            log.info("session %s cut back before the retried prompt", session_id)
        lease.trim = None
        if agent is None and session_id is None:
            await self._await_spare(key)
            agent = self._take_spare(key)
            if agent is None:
                self._retarget_spare(command, options, env)
        if agent is None:
            agent = await self._start(command, options, env, key, session_id)
        agent.busy = True
        agent.last_used = time.monotonic()
        lease.live = agent
        lease.used_rpc = True
        if agent.session_id and agent.session_id not in self._live:
            self._live[agent.session_id] = agent
            self.bind(lease, agent.session_id)
        await self._evict_beyond_limit()
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
        if agent is not None and (not agent.alive or agent.key != key):
            self._forget(agent)
            await self.stop(agent)
            agent = None
        if agent is None and options.session_id is None:
            await self._await_spare(key)
            agent = self._take_spare(key)
            if agent is None:
                self._retarget_spare(command, options, env)
            if self._spare_launch is not None:
                # the next spare serves a next new conversation, rarer than this one's first
                # prompt, which a Node start-up meanwhile would slow down
                self.prime(*self._spare_launch, delay=OPENED_SPARE_PRIME_DELAY_SECONDS)
        if agent is None:
            agent = await self._start(command, options, env, key, options.session_id)
        if agent.session_id is None:
            await self.stop(agent)
            raise StartFailure(
                ErrorInfo(kind="session", message="the live pi did not report a session id", retryable=True)
            )
        agent.last_used = time.monotonic()
        self._live[agent.session_id] = agent
        await self._evict_beyond_limit()
        try:
            models = await agent.rpc.available_models()
            levels = await agent.rpc.thinking_levels()
        except RpcError as exc:
            log.info("live agent pid %d: could not list its models: %s", agent.pid, exc)
            models, levels = [], []
        choices = tuple(
            ModelChoice(str(m.get("provider")), str(m.get("id")), str(m.get("name") or m.get("id")))
            for m in models
            if m.get("provider") and m.get("id")
        )
        return OpenedConversation(
            session_id=agent.session_id,
            provider=agent.provider,
            model=agent.model,
            thinking=agent.thinking,
            models=choices,
            thinking_levels=tuple(levels),
        )

    def checkin(self, agent: LiveAgent) -> None:
        """An attempt is done with the agent; it stays for the conversation's next prompt."""
        agent.busy = False
        agent.last_used = time.monotonic()
        agent.history = True
        if len(self._live) > self.max_live and self._tasks is not None:
            self._tasks.start_soon(self._evict_beyond_limit)

    async def invalidate(self, agent: LiveAgent) -> None:
        """The agent is gone or must go: forget it and stop its tree (idempotent)."""
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

    def live_session_ids(self) -> set[str]:
        """Ids of the conversations with a live agent (pi/sessions' `live`)."""
        return {sid for sid, agent in self._live.items() if agent.alive}

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
            elif self._tasks is not None:
                # A new conversation elsewhere retargeted the spare while this one started.
                self._tasks.start_soon(self.stop, spare)
        finally:
            self._spare_pending = self._spare_spawning = False
            self._spare_ready.set()
        if retargeted:
            self.prime_again()

    def _take_spare(self, key: LiveKey) -> LiveAgent | None:
        spare = self._spare
        if spare is None:
            return None
        self._spare = None
        if spare.key == key and spare.alive:
            log.info("live agent: took the spare (pid %d)", spare.pid)
            return spare
        if self._tasks is not None:
            self._tasks.start_soon(self.stop, spare)
        return None

    # ------------------------------------------------------------------ starting and stopping

    async def _start(
        self,
        command: tuple[str, ...],
        options: RunOptions,
        env: Mapping[str, str],
        key: LiveKey,
        session_id: str | None,
    ) -> LiveAgent:
        from dataclasses import replace

        launch_options = replace(options, session_id=session_id, continue_session=False)
        if session_id in self._opened and not await anyio.to_thread.run_sync(
            session_exists, session_id, False, options.cwd, env
        ):
            # pi had not written the session yet (its first prompt failed, was cancelled or pi
            # died first): start it anew under the same id, so the conversation keeps its id.
            spec: LaunchSpec = rpc_launch_spec(
                command, replace(launch_options, session_id=None), new_session_id=session_id
            )
        else:
            spec = rpc_launch_spec(command, launch_options)
        try:
            child = await spawn(spec.argv, spec.cwd, {**env, **spec.env})
        except SpawnError as exc:
            raise StartFailure(self.launcher.spawn_failure(command, str(exc))) from exc
        rpc = PiRpc(child, wait_writable=self.wait_writable)
        agent = LiveAgent(
            key=key,
            child=child,
            rpc=rpc,
            cwd=options.cwd,
            provider=options.provider,
            model=options.model,
            thinking=options.thinking,
        )
        assert self._tasks is not None, "the conversation registry is not serving"
        self._tasks.start_soon(self._watch, agent)
        self._starting.add(agent)
        try:
            state = await agent.rpc.prepare()
        except RpcError as exc:
            await self._start_failed(agent, command, exc)
            raise AssertionError("unreachable") from exc
        except BaseException:
            # Cancelled while pi started (a spare primed just as the bridge stops): nobody holds
            # this agent yet, so stop it here or it outlives the bridge.
            await self.stop(agent)
            raise
        finally:
            self._starting.discard(agent)
        self.supported = True
        sid = state.get("sessionId")
        agent.session_id = sid if isinstance(sid, str) else session_id
        if agent.session_id:
            self._opened.add(agent.session_id)
        path = state.get("sessionFile")
        agent.session_file = path if isinstance(path, str) else None
        model = state.get("model")
        if isinstance(model, dict):  # what pi runs now; a run naming only a model keeps its provider
            provider, model_id = model.get("provider"), model.get("id")
            agent.provider = provider if isinstance(provider, str) else agent.provider
            agent.model = model_id if isinstance(model_id, str) else agent.model
        level = state.get("thinkingLevel")
        if isinstance(level, str):  # what pi runs now: a first prompt asking for it sends nothing
            agent.thinking = level
        count = state.get("messageCount")
        agent.history = isinstance(count, int) and count > 0
        log.info("live agent pid %d up for session %s", child.pid, agent.session_id)
        return agent

    async def _start_failed(self, agent: LiveAgent, command: tuple[str, ...], exc: RpcError) -> None:
        if exc.kind == "closed":
            await wait_exit(agent.child, 3.0)
        code = agent.child.returncode
        await self.stop(agent)
        stderr = agent.rpc.stderr.text()
        signal_name = None
        if code is not None and code < 0:
            signal_name = f"signal {-code}"
            code = None
        kind, retryable = classify_exit(code, signal_name, stderr)
        if exc.kind == "closed" and self.supported is not True and kind != "session":
            raise NoRpc(f"it exited (code {code}) before answering") from exc
        if exc.kind == "timeout":
            message = f"the live pi did not answer: {exc}"
            raise StartFailure(
                ErrorInfo(kind="stalled", message=message, retryable=True, stderr=stderr or None)
            )
        tail = " ".join(stderr.split())[-300:]
        message = f"the live pi could not start: {exc}" + (f": {tail}" if tail else "")
        raise StartFailure(
            ErrorInfo(kind=kind, message=message, retryable=retryable, exit_code=code, stderr=stderr or None)
        )

    async def _watch(self, agent: LiveAgent) -> None:
        """Read the agent's output; when it closes while idle, forget and stop it (a crash between
        runs is noticed here; the conversation's next run resumes it from its file)."""
        with anyio.CancelScope() as scope:
            agent.scope = scope
            await agent.rpc.serve()
            if not agent.busy:
                log.warning("live agent pid %d of session %s closed its output", agent.pid, agent.session_id)
                self._forget(agent)
                await self.stop(agent)

    def _forget(self, agent: LiveAgent) -> None:
        if agent.session_id and self._live.get(agent.session_id) is agent:
            del self._live[agent.session_id]
        if agent in self._orphans:
            self._orphans.remove(agent)
        if self._spare is agent:
            self._spare = None

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

    async def _evict_beyond_limit(self) -> None:
        idle = sorted((a for a in self._live.values() if not a.busy), key=lambda a: a.last_used)
        while len(self._live) > self.max_live and idle:
            agent = idle.pop(0)
            log.info("live agent of session %s evicted (more than %d live)", agent.session_id, self.max_live)
            self._forget(agent)
            await self.stop(agent)


def describe(agent: LiveAgent) -> dict[str, Any]:
    """A log-friendly view of an agent."""
    return {"pid": agent.pid, "session": agent.session_id, "busy": agent.busy}
