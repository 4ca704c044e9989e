"""Run orchestration: the registry of live runs, caller-side retry, the concurrency limit, cancels.

This layer owns everything that spans attempts. The provider below it makes exactly one attempt
and knows nothing of retry; here each retry is announced with `run.retrying`, every message is
stamped with its attempt and a gap-free `seq`, and the result counts the attempts.
One task group, owned by `RunRegistry.serve`, holds every run: no fire-and-forget tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio
import anyio.abc

from bridge import agents
from bridge.agents import seam
from bridge.agents.seam import Out, RunOptions, SessionCheckpoint
from bridge.config import BridgeConfig
from bridge.contract import (
    AgentInfo,
    CancelledRunData,
    CancelResult,
    EffectiveSettings,
    ErrorInfo,
    RetryPolicy,
    RunInfo,
    RunParams,
    RunResult,
    RunsResult,
    RunState,
    ShutdownReceipt,
    SteerResult,
    Usage,
)
from bridge.engines.cancel import CancelToken
from bridge.engines.conversations import Conversations, Lease, NoRpc, StartFailure
from bridge.engines.endings import AttemptLimits, AttemptOutcome
from bridge.engines.json_engine import Attempt
from bridge.engines.rpc_engine import RpcAttempt
from bridge.engines.stored_conversations import StoredConversations
from bridge.engines.warm_pool import WarmPool
from bridge.runs.redact import Redactor, mask_in_logs

log = logging.getLogger(__name__)

# The second pre-spawn (the session follow-up) waits until the user is likely idle: loading a
# Node runtime takes a core for a while, and a run that starts meanwhile streams slower (its
# first message comes later). A run that starts first drops it (WarmPool.yield_to_run).
Sink = Callable[[list[dict[str, Any]]], None]
MAX_REMEMBERED_SESSIONS: Final = 4096


#: A conversation opened ahead of its first prompt, as the fronts see it.
OpenedConversation = seam.OpenedConversation
#: The agent a front serves (the fronts hold it, and hand it to the registry).
AgentAdapter = seam.AgentAdapter


class DuplicateRunError(ValueError):
    """A run with this id is live already."""


class ShuttingDownError(RuntimeError):
    """The registry no longer serves: the bridge is on its way out."""


class AgentChoiceError(ValueError):
    """The run names an agent that is unknown, or not the one its session belongs to."""


class NoLiveMode(Exception):
    """The agent command does not speak its live mode, so no conversation opens ahead of a prompt."""


class OpenFailure(Exception):
    """A conversation's live agent could not be started or configured; carries the error (masked)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(eq=False)
class Run:
    """One pi/run request: its state, message counter, cancel token and, at the end, its answer."""

    run_id: str
    params: RunParams
    options: RunOptions
    sink: Sink
    cancel: CancelToken = field(default_factory=CancelToken)
    state: RunState = "queued"
    attempt: int = 1
    seq: int = 0
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    pid: int | None = None
    session_id: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: RunResult | CancelledRunData | None = None
    cancel_receipt: ShutdownReceipt | None = None
    redactor: Redactor = field(default_factory=Redactor)
    # Set while an rpc-engine attempt streams: hands pi a steering message (None = taken).
    steerer: Callable[[str], Awaitable[str | None]] | None = None
    # The agent CLI that runs this run, and how it is started.
    adapter: AgentAdapter | None = None
    command: tuple[str, ...] = ()
    # Called once the run has its answer, before `done` is set (the request's answer goes out).
    on_done: Callable[[Run], None] | None = None

    def set_steerer(self, steerer: Callable[[str], Awaitable[str | None]] | None) -> None:
        """The attempt streaming now can (or no longer can) take steering messages."""
        self.steerer = steerer

    def set_state(self, state: RunState) -> None:
        """Move to a new lifecycle state, logged old -> new."""
        if state != self.state:
            log.info("run %s: %s -> %s", self.run_id, self.state, state)
            self.state = state

    def emit(self, outs: list[Out]) -> None:
        """Stamp messages with runId, attempt and the next seq; hand them to the sink in one batch."""
        batch: list[dict[str, Any]] = []
        for out in outs:
            content = out.content
            if out.type in _CARRY_ERRORS:
                content = _redacted(self.redactor, out.type, content)
            self.seq += 1
            batch.append(
                {
                    "runId": self.run_id,
                    "attempt": self.attempt,
                    "seq": self.seq,
                    "type": out.type,
                    "content": content,
                }
            )
        if batch:
            self.sink(batch)

    def note_session(self, session_id: str) -> None:
        """The run's conversation is known (a new one's id included): pi/closeSession finds it."""
        self.session_id = session_id

    def note_pid(self, pid: int) -> None:
        """The attempt's agent process is up (pi/runs shows its pid while the run is live)."""
        self.pid = pid

    def info(self) -> RunInfo:
        """This run as listed by pi/runs."""
        return RunInfo(
            run_id=self.run_id,
            state=self.state,
            attempt=self.attempt,
            started_at=self.started_at,
            session_id=self.session_id,
            pid=self.pid,
        )


# The messages that carry an error's text (an agent's stderr tail, a provider's message).
_CARRY_ERRORS = frozenset({"terminal.failed", "run.retrying", "tool.failed"})


def _redacted(redactor: Redactor, kind: str, content: dict[str, Any]) -> dict[str, Any]:
    """A message's content with the secrets in its error text masked."""
    if kind == "terminal.failed":
        return {**content, "error": redactor.error(content["error"])}
    key = "reason" if kind == "run.retrying" else "error"
    text = content.get(key)
    return {**content, key: redactor.text(text)} if isinstance(text, str) else content


def backoff_delay(policy: RetryPolicy, failed_attempt: int) -> int:
    """Exponential backoff with jitter, in ms: up to initial * 2^(n-1), capped, at least half."""
    ceiling = min(policy.max_delay_ms, policy.initial_delay_ms * 2 ** (failed_attempt - 1))
    return int(ceiling * (0.5 + random.random() / 2))


class RunRegistry:
    """Starts, lists, cancels and stops runs; owns the task group that holds them."""

    def __init__(
        self,
        adapter: AgentAdapter,
        config: BridgeConfig,
        sink: Sink,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.adapter = adapter
        self.config = config
        mask_in_logs(config.env)
        self._sink = sink
        self._adapters: dict[str, AgentAdapter] = {adapter.name: adapter}
        # The agent of each session a run has used (a conversation stays with its agent).
        self._session_agents: OrderedDict[str, str] = OrderedDict()
        self._wait_writable = wait_writable
        self._runs: dict[str, Run] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        # Each run's task. Not in the task group: spawning there delays a follow-up prompt
        # before pi gets it, and a run is never stopped by cancelling its task anyway: its cancel
        # token stops it, with a cleanup nothing interrupts (stop_all, when serving ends).
        self._run_tasks: set[asyncio.Task[None]] = set()
        self._slots = anyio.Semaphore(config.max_concurrent_runs)
        self._closing = anyio.Event()
        self._stopping = False
        self.pool = WarmPool(enabled=config.warm_pool, ttl=config.warm_pool_ttl_seconds)
        self.conversations = Conversations(
            adapter,
            max_live=config.max_live_sessions,
            idle_seconds=config.session_idle_seconds,
            wait_writable=self._writable,
        )
        # The conversations of agents with no live mode (their sessions, resumed per prompt).
        self.stored = StoredConversations()

    async def _writable(self) -> None:
        if self._wait_writable is not None:
            await self._wait_writable()

    def settings(self) -> EffectiveSettings:
        """The settings in force, as the initialize answer reports them."""
        config = self.config
        return EffectiveSettings(
            pi_command=list(config.command),
            retry=config.retry,
            max_concurrent_runs=config.max_concurrent_runs,
            queue_when_busy=config.queue_when_busy,
            silence_timeout_ms=int(config.silence_seconds * 1000) if config.silence_seconds else None,
            warm_pool=config.warm_pool,
            warm_pool_ttl_ms=int(config.warm_pool_ttl_seconds * 1000),
            engine=config.engine,
            max_live_sessions=config.max_live_sessions,
            session_idle_ms=int(config.session_idle_seconds * 1000),
        )

    # ------------------------------------------------------------------ agents

    def adapter_named(self, name: str) -> AgentAdapter:
        """The adapter of agent `name` (built once); raises AgentChoiceError for an unknown one."""
        adapter = self._adapters.get(name)
        if adapter is None:
            settings = {
                "permission_mode": self.config.permission_mode,
                "allowed_tools": self.config.allowed_tools,
            }
            try:
                adapter = agents.build_adapter(name, settings)
            except agents.UnknownAgentError as exc:
                raise AgentChoiceError(str(exc)) from None
            self._adapters[name] = adapter
        return adapter

    def command_of(self, adapter: AgentAdapter) -> tuple[str, ...]:
        """How to start an agent: initializationOptions.agents, else the server's command for its
        own adapter, else the agent's executable on PATH."""
        configured = self.config.agents.get(adapter.name)
        if configured:
            return configured
        if adapter is self.adapter:
            return self.config.command
        return agents.default_command(adapter)

    def spawn_background(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `work` in the registry's task group (ended with it); nothing if not serving."""
        if self._tasks is not None:
            self._tasks.start_soon(work)

    async def prepare_first_prompt(self) -> None:
        """Build every agent's adapter now, while the spare agent boots: a session's first prompt
        asks each whether the session is its own, and building one imports its package (slow
        for Claude Code's). One adapter per loop step. (Building every wire validator ahead too
        was tried: the bridge then held much more memory after a huge prompt, cause not found.)"""
        for name in self.agent_names():
            try:
                self.adapter_named(name)
            except Exception as exc:  # an agent that cannot be built is the prompt's to report
                log.info("agent %s not built ahead: %s", name, exc)
            await anyio.sleep(0)

    def agent_names(self) -> list[str]:
        """Every agent a run can name: the known ones and any configured."""
        names = [self.adapter.name, *agents.agent_names(), *self.config.agents]
        return list(dict.fromkeys(names))

    def agents_info(self) -> list[AgentInfo]:
        """Each known agent with its command, whether it is found and its version (initialize)."""
        found: list[AgentInfo] = []
        for name in self.agent_names():
            try:
                adapter = self.adapter_named(name)
            except AgentChoiceError:
                continue
            found.append(agents.probe(name, self.command_of(adapter), self.config.env))
        return found

    def history_adapters(self) -> list[AgentAdapter]:
        """The adapters whose stored sessions pi/sessions and pi/session read: every known agent."""
        adapters: list[AgentAdapter] = []
        for name in self.agent_names():
            try:
                adapters.append(self.adapter_named(name))
            except AgentChoiceError:
                continue
        return adapters

    def _remember_agent(self, session_id: str, agent: str) -> None:
        """Which agent owns a session (a cache: a forgotten one is asked of each agent again)."""
        self._session_agents[session_id] = agent
        self._session_agents.move_to_end(session_id)
        while len(self._session_agents) > MAX_REMEMBERED_SESSIONS:
            self._session_agents.popitem(last=False)

    def default_agent(self) -> str:
        """The agent of a run that names none and resumes no known session."""
        return self.config.default_agent or self.adapter.name

    def _choose_agent(self, params: RunParams, cwd: str) -> AgentAdapter:
        """The run's agent: the one it names, else its session's, else the default."""
        session_agent: str | None = None
        if params.session_id:
            session_agent = self._session_agents.get(params.session_id)
            if session_agent is None:
                for name in self.agent_names():
                    try:
                        candidate = self.adapter_named(name)
                    except AgentChoiceError:
                        continue
                    if candidate.session_exists(params.session_id, False, cwd, self.config.env):
                        session_agent = name
                        break
        if params.agent and session_agent and params.agent != session_agent:
            raise AgentChoiceError(
                f"session {params.session_id!r} belongs to agent {session_agent!r}, not {params.agent!r}"
            )
        return self.adapter_named(params.agent or session_agent or self.default_agent())

    def reconfigure(self, config: BridgeConfig) -> None:
        """Apply settings from initialize (before any run starts)."""
        self.config = config
        mask_in_logs(config.env)  # the agents get these: what they print may show them
        self._slots = anyio.Semaphore(config.max_concurrent_runs)
        self.pool.enabled = config.warm_pool
        self.pool.ttl = config.warm_pool_ttl_seconds
        self.conversations.max_live = config.max_live_sessions
        self.conversations.idle_seconds = config.session_idle_seconds

    def prime_live(self, default_cwd: str) -> None:
        """After `initialized`: pre-spawn one live agent with the server defaults (rpc engine)."""
        config = self.config
        if config.engine != "rpc" or not config.warm_pool or self.default_agent() != self.adapter.name:
            return
        if self.adapter.live_mode() is None:
            return
        options = RunOptions(
            prompt="", cwd=default_cwd, provider=config.default_provider, model=config.default_model
        )
        self.conversations.prime(config.command, options, config.env)

    async def open_conversation(self, cwd: str, session_id: str | None = None) -> OpenedConversation:
        """Open a conversation's live agent ahead of its first prompt (rpc engine): a new one on
        the pre-spawned agent, or `session_id` resumed. Raises OpenFailure or NoLiveMode.
        An agent with no live mode gets a conversation of per-prompt runs (stored_conversations.py)."""
        config = self.config
        if self.adapter.live_mode() is None:
            opened = self.stored.open(session_id, config.default_provider, config.default_model)
            self._remember_agent(opened.session_id, self.adapter.name)
            return opened
        options = RunOptions(
            prompt="",
            cwd=cwd,
            provider=config.default_provider,
            model=config.default_model,
            session_id=session_id,
            resumed=session_id is not None,
        )
        try:
            return await self.conversations.open(config.command, options, config.env)
        except StartFailure as exc:  # it leaves the bridge: the agent's stderr masked, as a run's error is
            error = Redactor(os.environ, config.env).error(exc.error.model_dump(by_alias=True))
            raise OpenFailure(ErrorInfo.model_validate(error)) from None
        except NoRpc as exc:
            raise NoLiveMode(str(exc)) from exc

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the runs' task group until `close`; runs still live then are stopped first."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                await tasks.start(self.pool.serve)
                await tasks.start(self.conversations.serve)
                task_status.started()
                await self._closing.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.stop_all("the bridge is shutting down")
        self._tasks = None

    def close(self) -> None:
        """Let `serve` return once every run has ended."""
        self._closing.set()

    def is_live_session(self, session_id: str) -> bool:
        """Whether a conversation of this session has a live agent now (none in the json engine)."""
        return self.conversations.live_agent(session_id) is not None

    # ------------------------------------------------------------------ requests

    def start(self, params: RunParams, default_cwd: str, on_done: Callable[[Run], None] | None = None) -> Run:
        """Register and start a run; raises DuplicateRunError for a live runId. `on_done` is
        called with the run once it has its answer, before waiters on `run.done` go on."""
        if self._tasks is None or self._stopping:
            raise ShuttingDownError("the bridge is shutting down: no run starts")
        run_id = params.run_id or f"run-{os.urandom(6).hex()}"
        if run_id in self._runs:
            raise DuplicateRunError(f"runId {run_id!r} is already live")
        cwd = params.cwd or default_cwd
        adapter = self._choose_agent(params, cwd)
        # A live conversation's agent knows whether it has history (the rpc engine asks it): no
        # look through the session files on the hot path of a follow-up prompt.
        session_id = params.session_id
        live = session_id is not None and self.conversations.live_agent(session_id) is not None
        resumed = live or adapter.session_exists(session_id, params.continue_session, cwd, self.config.env)
        options = RunOptions(
            prompt=params.prompt,
            cwd=cwd,
            provider=params.provider or self.config.default_provider,
            model=params.model or self.config.default_model,
            thinking=params.thinking,
            tools=tuple(params.tools) if params.tools is not None else None,
            session_id=params.session_id,
            continue_session=params.continue_session,
            live_thoughts=params.live_thoughts,
            resumed=resumed,
            images=tuple(params.images or ()),
        )
        options = self.stored.options_for(adapter, options, self.config.env)
        run = Run(
            run_id=run_id,
            params=params,
            options=options,
            sink=self._sink,
            redactor=Redactor(os.environ, self.config.env),
            adapter=adapter,
            command=self.command_of(adapter),
            on_done=on_done,
        )
        self._runs[run_id] = run
        task = asyncio.get_running_loop().create_task(self._drive(run), name=f"run {run_id}")
        self._run_tasks.add(task)
        task.add_done_callback(self._run_tasks.discard)
        return run

    def live_run(self, run_id: str) -> Run | None:
        """The live run of this id, if any."""
        return self._runs.get(run_id)

    async def cancel(self, run_id: str, reason: str = "cancelled by the client") -> CancelResult:
        """Stop a run through the three-stage shutdown; answers when its process tree is gone."""
        run = self.live_run(run_id)
        if run is None:
            return CancelResult(run_id=run_id, found=False)
        run.cancel.cancel(reason)
        with anyio.CancelScope(shield=True):
            await run.done.wait()
        return CancelResult(run_id=run_id, found=True, shutdown=run.cancel_receipt)

    def list(self) -> RunsResult:
        """The live runs, the idle pre-spawned agents and the live conversations."""
        return RunsResult(
            runs=[run.info() for run in self._runs.values()],
            warm_pids=[*self.pool.warm_pids(), *self.conversations.spare_pids()],
            warm_rss_bytes=self.pool.rss_bytes() + self.conversations.rss_bytes(),
            live=self.conversations.listing(),
        )

    async def steer(self, run_id: str, message: str) -> SteerResult:
        """Hand a steering message to a running run of a live conversation."""
        run = self._runs.get(run_id)
        if run is None:
            return SteerResult(run_id=run_id, accepted=False, reason="no such live run")
        if run.cancel.cancelled:
            return SteerResult(run_id=run_id, accepted=False, reason="the run is stopping")
        if run.steerer is None:
            reason = "the run is not streaming in a live conversation"
            return SteerResult(run_id=run_id, accepted=False, reason=reason)
        refused = await run.steerer(message)
        if refused is None:
            return SteerResult(run_id=run_id, accepted=True)
        return SteerResult(run_id=run_id, accepted=False, reason=run.redactor.text(refused))  # pi's words

    async def close_session(self, session_id: str) -> bool:
        """Stop a conversation's live agent (cancelling its runs first); the file stays."""
        for run in list(self._runs.values()):
            if session_id in (run.session_id, run.options.session_id):
                await self.cancel(run.run_id, "the conversation was closed")
        return await self.conversations.close_session(session_id)

    async def stop_all(self, reason: str) -> None:
        """Cancel every live run and wait until each has ended and its tree is gone."""
        self._stopping = True  # nothing is pre-spawned, and no run starts, on the way out
        with anyio.CancelScope(shield=True):
            while runs := list(self._runs.values()):
                for run in runs:
                    run.cancel.cancel(reason)
                for run in runs:
                    await run.done.wait()
            await self.pool.close()
            await self.conversations.close()

    # ------------------------------------------------------------------ driving a run

    @staticmethod
    def _adapter(run: Run) -> AgentAdapter:
        assert run.adapter is not None, "start() chose the run's agent"
        return run.adapter

    def _uses_rpc(self, run: Run) -> bool:
        """Whether the run goes through a live conversation (the rpc engine): only for agents
        that speak an rpc mode; every other agent runs one process per attempt (json engine)."""
        adapter = self._adapter(run)
        return self.config.engine == "rpc" and adapter is self.adapter and adapter.live_mode() is not None

    async def _drive(self, run: Run) -> None:
        try:
            await self._drive_attempts(run)
        except Exception as exc:  # the bridge must survive anything a run does
            log.exception("run %s crashed inside the bridge", run.run_id)
            error = ErrorInfo(kind="internal", message=f"internal error: {exc}", retryable=False)
            run.answer = RunResult(
                run_id=run.run_id, status="failed", text="", attempts=run.attempt, error=error
            )
        finally:
            if run.session_id and run.adapter is not None:
                self._remember_agent(run.session_id, run.adapter.name)
            self._runs.pop(run.run_id, None)
            if run.on_done is not None:
                try:
                    run.on_done(run)
                except Exception:  # an answer that cannot be sent must not keep the run open
                    log.exception("run %s: its answer could not be sent", run.run_id)
            run.done.set()

    async def _acquire_slot(self, run: Run) -> bool:
        """Take a concurrency slot: wait in line (until cancelled) or fail fast, as configured."""
        try:
            self._slots.acquire_nowait()
            return True
        except anyio.WouldBlock:
            if not self.config.queue_when_busy:
                return False
        # Tell the client why nothing happens yet; position counts this run (1 = next).
        position = sum(1 for other in self._runs.values() if other.state == "queued")
        run.emit([Out("run.queued", {"position": position, "limit": self.config.max_concurrent_runs})])
        log.info("run %s waits in line at position %d", run.run_id, position)
        acquired = False
        async with anyio.create_task_group() as tasks:

            async def give_up_on_cancel() -> None:
                await run.cancel.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(give_up_on_cancel)
            await self._slots.acquire()
            acquired = True
            tasks.cancel_scope.cancel()
        return acquired

    async def _lease(self, run: Run) -> Lease | None:
        """The rpc engine's hold on the run's conversation (None: the json engine runs it)."""
        if not self._uses_rpc(run) or self.conversations.supported is False:
            return None
        session_id = await self.conversations.resolve_session(run.options, self.config.env)

        def queued() -> None:
            run.emit([Out("run.queued", {"position": 1, "limit": 1, "reason": "session"})])
            log.info("run %s waits for the other run of session %s", run.run_id, session_id)

        lease = await self.conversations.lease(session_id, run.cancel, queued)
        return lease

    async def _resolve_session(self, run: Run) -> ErrorInfo | None:
        """The run's sessionId as the full id of the session it names (a unique prefix, a file
        path), so every table keyed by session (leases, live agents, the warm pool) sees one
        conversation as one; an error when it names several."""
        session_id = run.options.session_id
        if session_id is None or self.conversations.live_agent(session_id) is not None:
            return None
        adapter = self._adapter(run)
        full = self.conversations.known_session(session_id) if self._uses_rpc(run) else None
        if full is None:
            try:
                full = await anyio.to_thread.run_sync(adapter.resolve_session_id, session_id, self.config.env)
            except ValueError as exc:
                return ErrorInfo(kind="session", message=f"sessionId: {exc}", retryable=False)
        if full is not None and full != session_id:
            log.info("run %s: session %s is %s", run.run_id, session_id, full)
            run.options = dataclasses.replace(run.options, session_id=full)
        return None

    async def _drive_attempts(self, run: Run) -> None:
        problem = await self._resolve_session(run)
        if problem is not None:
            run.emit(self._adapter(run).new_mapper(run.options).finish_failed(problem))
            run.answer = RunResult(run_id=run.run_id, status="failed", text="", attempts=1, error=problem)
            return
        lease = await self._lease(run)
        if lease is None and self._uses_rpc(run) and run.cancel.cancelled:
            receipt = ShutdownReceipt(stage="exited", elapsed_ms=0.0, pids=[], survivors=[])
            run.cancel_receipt = receipt
            run.emit(self._adapter(run).new_mapper(run.options).finish_cancelled(receipt))
            run.answer = self._answer(run, AttemptOutcome("cancelled", "", shutdown=receipt))
            return
        try:
            await self._drive_leased(run, lease)
        finally:
            if lease is not None:
                self.conversations.release(lease)
        if lease is not None and lease.used_rpc:
            self.conversations.prime_again()

    async def _drive_leased(self, run: Run, lease: Lease | None) -> None:
        policy = run.params.retry or self.config.retry
        got_slot = await self._acquire_slot(run)
        if not got_slot and not run.cancel.cancelled:
            busy = ErrorInfo(
                kind="busy",
                message=f"{self.config.max_concurrent_runs} runs are live already and queueing is off",
                retryable=True,
            )
            mapper = self._adapter(run).new_mapper(run.options)
            run.emit(mapper.finish_failed(busy))
            run.answer = RunResult(run_id=run.run_id, status="failed", text="", attempts=1, error=busy)
            return
        session = run.options.session_id  # a retry may name the session its first attempt started
        self.pool.session_in_use(session)
        if lease is not None:  # a live conversation takes nothing from the pool: drop its copies
            self.pool.forget_session(session)
        try:
            outcome = await self._attempts(run, policy, lease)
        finally:
            self.pool.session_released(session)
            if got_slot:
                self._slots.release()
        run.answer = self._answer(run, outcome)
        # a cancelled prompt is no sign of the next one; a live conversation needs no pre-spawn
        if (lease is None or not lease.used_rpc) and outcome.status != "cancelled":
            self._prime_next(run)

    def _prime_next(self, run: Run) -> None:
        """Pre-spawn what the run's agent says the next prompt most likely needs."""
        if self._closing.is_set() or self._stopping:
            return
        command, env = run.command, self.config.env
        for launch in self._adapter(run).warm_launches(command, run.options, run.session_id):
            self.pool.prime(launch.spec, env, launch.session, delay=launch.delay)

    def _new_attempt(self, run: Run, limits: AttemptLimits, lease: Lease | None) -> Attempt | RpcAttempt:
        """The engine for this attempt: the conversation's live agent, or one process (json)."""
        adapter = self._adapter(run)

        def json_attempt() -> Attempt:
            return Attempt(
                adapter,
                run.command,
                run.options,
                run.emit,
                run.cancel,
                limits,
                self._wait_writable,
                self.config.env,
                self.pool,
                on_started=run.note_pid,
            )

        if lease is None or self.conversations.supported is False:
            return json_attempt()
        return RpcAttempt(
            self.conversations,
            lease,
            adapter,
            run.command,
            run.options,
            run.emit,
            run.cancel,
            limits,
            extra_env=self.config.env,
            retrying=run.attempt > 1,
            on_started=run.note_pid,
            on_steerable=run.set_steerer,
            fallback=lambda: json_attempt().run(),
            on_session=run.note_session,
        )

    async def _attempts(self, run: Run, policy: RetryPolicy, lease: Lease | None = None) -> AttemptOutcome:
        deadline = time.monotonic() + run.params.deadline_ms / 1000 if run.params.deadline_ms else None
        limits = AttemptLimits(
            deadline=deadline,
            deadline_ms=run.params.deadline_ms,
            silence_seconds=self.config.silence_seconds,
        )
        checkpoint = await self._checkpoint(run, policy, lease)
        while True:
            run.set_state("starting")
            if run.attempt > 1:
                await self._rewind(run, checkpoint)
            attempt = self._new_attempt(run, limits, lease)
            run.set_state("running")
            outcome = await attempt.run()
            run.pid = outcome.pid
            run.session_id = outcome.session_id or run.session_id
            if outcome.status == "failed" and run.cancel.cancelled:
                # The cancel came as the attempt was failing: the user asked for a stop, and got one.
                outcome = self._cancelled_after_failure(run, outcome)
            if outcome.status == "cancelled":
                run.cancel_receipt = outcome.shutdown
            if outcome.status != "failed" or outcome.error is None or not outcome.error.retryable:
                return outcome
            if run.attempt >= policy.max_attempts:
                return outcome
            delay_ms = backoff_delay(policy, run.attempt)
            if deadline is not None and time.monotonic() + delay_ms / 1000 >= deadline:
                return outcome
            run.set_state("backoff")
            run.attempt += 1
            run.emit(
                [
                    Out(
                        "run.retrying",
                        {"attempt": run.attempt, "delayMs": delay_ms, "reason": outcome.error.message},
                    )
                ]
            )
            with anyio.move_on_after(delay_ms / 1000):
                await run.cancel.wait()
            if run.cancel.cancelled:
                receipt = ShutdownReceipt(stage="exited", elapsed_ms=0.0, pids=[], survivors=[])
                run.cancel_receipt = receipt
                mapper = self._adapter(run).new_mapper(run.options)
                run.emit(mapper.finish_cancelled(receipt))
                return AttemptOutcome("cancelled", "", shutdown=receipt, session_id=run.session_id)

    async def _checkpoint(
        self, run: Run, policy: RetryPolicy, lease: Lease | None
    ) -> SessionCheckpoint | None:
        """Where the run's stored session stands before its first attempt, when a retry may have
        to go back there: each json-engine attempt leaves its prompt in the session (the rpc
        engine cuts its own back, Lease.trim)."""
        if policy.max_attempts < 2 or (lease is not None and self.conversations.supported is not False):
            return None
        adapter = self._adapter(run)
        return await anyio.to_thread.run_sync(adapter.checkpoint_session, run.options, self.config.env)

    async def _rewind(self, run: Run, checkpoint: SessionCheckpoint | None) -> None:
        """Before a retried attempt: the session as it was before the run, so the model sees the
        earlier turns and the prompt once."""
        adapter = self._adapter(run)
        if checkpoint is None:  # the first attempt may have stored the session it was to start
            run.options = await anyio.to_thread.run_sync(
                self.stored.options_for, adapter, run.options, self.config.env
            )
            return
        run.options = await anyio.to_thread.run_sync(
            adapter.rewind_session, checkpoint, run.session_id, run.options, self.config.env
        )
        log.info("run %s: session %s cut back before attempt %d", run.run_id, run.session_id, run.attempt)

    @staticmethod
    def _cancelled_after_failure(run: Run, failed: AttemptOutcome) -> AttemptOutcome:
        """A failed attempt's outcome as the cancel's: its stop's receipt, or that it had exited."""
        receipt = failed.shutdown or ShutdownReceipt(
            stage="exited",
            elapsed_ms=0.0,
            pids=[failed.pid] if failed.pid and not failed.agent_kept else [],
            survivors=[],
            agent_kept=failed.agent_kept,
        )
        return AttemptOutcome(
            "cancelled", failed.text, shutdown=receipt, session_id=run.session_id, pid=failed.pid
        )

    def _answer(self, run: Run, outcome: AttemptOutcome) -> RunResult | CancelledRunData:
        if outcome.status == "cancelled":
            return CancelledRunData(
                run_id=run.run_id,
                status="cancelled",
                text=outcome.text,
                shutdown=outcome.shutdown,
                session_id=run.session_id,
                attempts=run.attempt,
            )
        return RunResult(
            run_id=run.run_id,
            status=outcome.status,
            text=outcome.text,
            stop_reason=outcome.stop_reason,
            session_id=run.session_id,
            usage=Usage.model_validate(outcome.usage) if outcome.usage else None,
            attempts=run.attempt,
            error=ErrorInfo.model_validate(run.redactor.error(outcome.error.model_dump(by_alias=True)))
            if outcome.error
            else None,
        )
