"""One run's attempts: its concurrency slot, its conversation's lease, retry and backoff."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping

import anyio
import anyio.to_thread

from bridge.agents.seam import AgentAdapter, ConfinedWhole, RewindsSessions, WarmsLaunches
from bridge.agents.values import Out, SessionCheckpoint
from bridge.checkpoints.recorder import Checkpoints
from bridge.config import BridgeConfig
from bridge.contract import ErrorInfo, RetryPolicy, SandboxSettings, ShutdownReceipt
from bridge.engines.attempt import Attempt, AttemptContext
from bridge.engines.endings import AttemptLimits, AttemptOutcome
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.live_agent import Lease
from bridge.engines.live.live_attempt import LiveAttempt, LiveHooks
from bridge.engines.one_process import ProcessAttempt
from bridge.engines.stored_conversations import StoredConversations
from bridge.engines.warm_pool import WarmPool
from bridge.policy import sandbox
from bridge.policy.gate import Gate
from bridge.process.spawn import environ_with
from bridge.process.trace import mark
from bridge.runs.run import Run

log = logging.getLogger(__name__)


def backoff_delay(policy: RetryPolicy, failed_attempt: int) -> int:
    """Exponential backoff with jitter, in ms: up to initial * 2^(n-1), capped, at least half."""
    ceiling = min(policy.max_delay_ms, policy.initial_delay_ms * 2 ** (failed_attempt - 1))
    return int(ceiling * (0.5 + random.random() / 2))


def whole_process_prefix(
    gate: Gate, agent: AgentAdapter, settings: SandboxSettings | None, cwd: str, given: Mapping[str, str]
) -> tuple[str, ...]:
    """The sandbox an agent that runs its own tools starts in whole (empty: no sandbox, or not
    such an agent); `given` is the agent's environment from the client. A conversation whose
    sandbox changes gets a new process, which loads its session: the live key holds it.
    Blocking I/O."""
    if settings is None or settings.mode == "off" or not isinstance(agent, ConfinedWhole):
        return ()
    if not agent.can_sandbox:
        return ()  # its own dirs are unknown: its sandboxed runs are refused (`_sandbox_problem`)
    environ = {**os.environ, **given}
    own, kept = agent.own_dirs(environ), agent.model_vars(environ)
    return gate.sandboxes.process_prefix(settings, cwd, environ, given, own, kept)


def _no_processes() -> ShutdownReceipt:
    """The receipt of a stop that found nothing running (between attempts, or before the first)."""
    return ShutdownReceipt(stage="exited", elapsed_ms=0.0, pids=[], survivors=[])


@dataclasses.dataclass(eq=False)
class Attempts:
    """Drives runs through their attempts, with what every run shares: the slots, the warm pool,
    the live and the stored conversations."""

    adapter: AgentAdapter
    config: BridgeConfig
    runs: Mapping[str, Run]
    pool: WarmPool
    conversations: Conversations
    stored: StoredConversations
    # Whether a pre-spawn for the next prompt is still welcome (not while the bridge stops).
    may_prime: Callable[[], bool]
    wait_writable: Callable[[], Awaitable[None]] | None = None
    # Serves the conversations of a live agent a run names beside the server's own (the
    # registry's task group); None: such a run gets one process per attempt.
    tasks: anyio.abc.TaskGroup | None = None
    # The conversations' modes and the permission check of the live agents' tool calls.
    gate: Gate | None = None
    # The workspace's files before each prompt (pi/checkpoints, pi/rewind).
    checkpoints: Checkpoints | None = None
    slots: anyio.Semaphore = dataclasses.field(init=False)
    # Those conversations, by agent name (each agent live per conversation, however chosen).
    others: dict[str, Conversations] = dataclasses.field(init=False, default_factory=dict)
    _opening: anyio.Lock = dataclasses.field(init=False, default_factory=anyio.Lock)

    def __post_init__(self) -> None:
        self.slots = anyio.Semaphore(self.config.max_concurrent_runs)
        gate = self.gate
        if self.checkpoints is not None and gate is not None:
            self.checkpoints.on_ready = lambda run: gate.unhold(run.session_id)

    def reconfigure(self, config: BridgeConfig) -> None:
        """New settings (before any run starts): the concurrency limit among them."""
        self.config = config
        self.slots = anyio.Semaphore(config.max_concurrent_runs)

    def _env(self, run: Run) -> dict[str, str]:
        """The environment the run's agent gets: the client's, under the agent's own."""
        return self.config.env_of(run.agent.name)

    def uses_live(self, run: Run) -> bool:
        """Whether the run goes through a live conversation (the live engine): every agent that
        has a live mode, however it was chosen (the server's own, or one a run names while the
        registry serves); every other agent runs one process per attempt (one-process engine)."""
        return self.is_live(run.agent)

    def is_live(self, adapter: AgentAdapter) -> bool:
        """Whether `adapter`'s conversations are live ones (its seam's live mode decides)."""
        if self.config.engine != "rpc" or adapter.live_mode() is None:
            return False
        return self._is_own(adapter) or self.tasks is not None

    def _is_own(self, adapter: AgentAdapter) -> bool:
        """Whether `adapter` is the server's own agent (by name: a run's choice may build another
        instance of it), whose conversations are `self.conversations`."""
        return adapter is self.adapter or adapter.name == self.adapter.name

    def conversations_of(self, run: Run) -> Conversations:
        """The live conversations of the run's agent (opened by `open_conversations` first)."""
        return self.live_conversations(run.agent)

    def live_conversations(self, adapter: AgentAdapter) -> Conversations:
        """The live conversations of `adapter`'s agent (the server's own until it has its own)."""
        if self._is_own(adapter):
            return self.conversations
        return self.others.get(adapter.name, self.conversations)

    def every_conversations(self) -> list[Conversations]:
        """The server's own agent's live conversations, then those of each agent runs named."""
        return [self.conversations, *self.others.values()]

    async def open_conversations(self, adapter: AgentAdapter) -> Conversations:
        """The live conversations of `adapter`'s agent, started once for an agent named beside
        the server's own (a run's, or a toolbox request's ahead of its first prompt)."""
        tasks = self.tasks
        if self._is_own(adapter) or not self.is_live(adapter) or tasks is None:
            return self.live_conversations(adapter)
        async with self._opening:
            if adapter.name not in self.others:
                conversations = Conversations(
                    adapter,
                    max_live=self.config.max_live_sessions,
                    idle_seconds=self.config.session_idle_seconds,
                    wait_writable=self.wait_writable,
                )
                await tasks.start(conversations.serve)
                self.others[adapter.name] = conversations
        return self.others[adapter.name]

    async def drive(self, run: Run) -> None:
        """Run every attempt of `run` until it has its answer."""
        mark("run.drive")
        await self.open_conversations(run.agent)
        problem = self._sandbox_problem(run) or await self._resolve_session(run)
        if problem is not None:
            run.fail(problem)
            return
        if self.gate is not None:
            trusted = await self.gate.trusts(run, self._env(run))
            run.options = dataclasses.replace(run.options, trusted=trusted)
            if run.sandboxed and isinstance(run.agent, ConfinedWhole):
                options, env = run.options, self._env(run)
                prefix = await anyio.to_thread.run_sync(
                    whole_process_prefix, self.gate, run.agent, options.sandbox, options.cwd, env
                )
                # it reaches its model through the network, so it keeps it: session.started says so
                kept = (run.options.sandbox or sandbox.OFF).model_copy(update={"network": True})
                run.options = dataclasses.replace(run.options, launch_prefix=prefix, sandbox=kept)
        mark("run.trusted")
        lease = await self._lease(run)
        mark("run.leased")
        if lease is None and self.uses_live(run) and run.cancel.cancelled:
            receipt = _no_processes()
            run.cancel_receipt = receipt
            run.emit(run.agent.new_mapper(run.options).finish_cancelled(receipt))
            run.answer = run.answer_of(AttemptOutcome("cancelled", "", shutdown=receipt))
            return
        conversations = self.conversations_of(run)
        try:
            await self._drive_leased(run, lease)
        finally:
            if lease is not None:
                conversations.slots.release(lease)
        if lease is not None and lease.used_live:
            conversations.spare.prime_again()

    def _sandbox_problem(self, run: Run) -> ErrorInfo | None:
        """Why the run cannot have the sandbox it asks for: it then fails before anything runs.
        Only a live agent reads its sandbox (the extension asks the bridge's board)."""
        settings = run.options.sandbox
        if settings is None or settings.mode == "off":
            return None
        problem = sandbox.problem(settings, run.agent.display_name, run.agent.can_sandbox)
        if problem is None and not self.uses_live(run):
            message = f"sandbox {settings.mode!r} needs the rpc engine (engine is {self.config.engine!r})"
            problem = ErrorInfo(kind="sandbox", message=message, retryable=False)
        return problem

    async def _acquire_slot(self, run: Run) -> bool:
        """Take a concurrency slot: wait in line (until cancelled) or fail fast, as configured."""
        try:
            self.slots.acquire_nowait()
            return True
        except anyio.WouldBlock:
            if not self.config.queue_when_busy:
                return False
        # Tell the client why nothing happens yet; position counts this run (1 = next).
        position = sum(1 for other in self.runs.values() if other.state == "queued")
        run.emit([Out("run.queued", {"position": position, "limit": self.config.max_concurrent_runs})])
        log.info("run %s waits in line at position %d", run.run_id, position)
        acquired = False
        async with anyio.create_task_group() as tasks:

            async def give_up_on_cancel() -> None:
                await run.cancel.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(give_up_on_cancel)
            await self.slots.acquire()
            acquired = True
            tasks.cancel_scope.cancel()
        return acquired

    async def _lease(self, run: Run) -> Lease | None:
        """the live engine's hold on the run's conversation (None: the one-process engine runs it)."""
        conversations = self.conversations_of(run)
        if not self.uses_live(run) or conversations.starter.supported is False:
            return None
        session_id = await conversations.resolve_session(run.options, self._env(run))

        def queued() -> None:
            run.waits_for = session_id
            run.emit([Out("run.queued", {"position": 1, "limit": 1, "reason": "session"})])
            log.info("run %s waits for the other run of session %s", run.run_id, session_id)

        try:
            return await conversations.slots.lease(session_id, run.cancel, queued)
        finally:
            run.waits_for = None

    async def _resolve_session(self, run: Run) -> ErrorInfo | None:
        """The run's sessionId as the full id of the session it names (a unique prefix, a file
        path), so every table keyed by session (leases, live agents, the warm pool) sees one
        conversation as one; an error when it names several."""
        session_id = run.options.session_id
        conversations = self.conversations_of(run)
        if session_id is None or conversations.slots.live_agent(session_id) is not None:
            return None
        adapter = run.agent
        full = conversations.slots.known_session(session_id) if self.uses_live(run) else None
        if full is None:
            try:
                full = await anyio.to_thread.run_sync(adapter.resolve_session_id, session_id, self._env(run))
            except ValueError as exc:
                return ErrorInfo(kind="session", message=f"sessionId: {exc}", retryable=False)
        if full is not None and full != session_id:
            log.info("run %s: session %s is %s", run.run_id, session_id, full)
            run.options = dataclasses.replace(run.options, session_id=full)
        return None

    async def _drive_leased(self, run: Run, lease: Lease | None) -> None:
        policy = run.params.retry or self.config.retry
        got_slot = await self._acquire_slot(run)
        if not got_slot and not run.cancel.cancelled:
            busy = ErrorInfo(
                kind="busy",
                message=f"{self.config.max_concurrent_runs} runs are live already and queueing is off",
                retryable=True,
            )
            run.fail(busy)
            return
        session = run.options.session_id  # a retry may name the session its first attempt started
        self.pool.session_in_use(session)
        if lease is not None:  # a live conversation takes nothing from the pool: drop its copies
            self.pool.forget_session(session)
        mark("run.slot")
        if self.checkpoints is not None and not run.cancel.cancelled:
            self.checkpoints.begin(run)
        try:
            if lease is None and run.before_tools is not None:
                run.take_checkpoint()
                await run.before_tools.wait()  # one process per prompt: its tools ask nobody
            outcome = await self._attempts(run, policy, lease)
        finally:
            self.pool.session_released(session)
            if got_slot:
                self.slots.release()
            if self.checkpoints is not None:
                run.after_answer.append(functools.partial(self.checkpoints.end, run))
        run.answer = run.answer_of(outcome)
        # a cancelled prompt is no sign of the next one; a live conversation needs no pre-spawn
        if (lease is None or not lease.used_live) and outcome.status != "cancelled":
            self._prime_next(run)

    def _prime_next(self, run: Run) -> None:
        """Pre-spawn what the run's agent says the next prompt most likely needs."""
        if not self.may_prime():
            return
        command, env = run.command, self._env(run)
        if not isinstance(run.agent, WarmsLaunches):
            return
        for launch in run.agent.warm_launches(command, run.options, run.session_id):
            self.pool.prime(launch.spec, env, launch.session, delay=launch.delay)

    def _new_attempt(self, run: Run, limits: AttemptLimits, lease: Lease | None) -> Attempt:
        """The engine for this attempt: the conversation's live agent, or one process."""
        context = AttemptContext(
            run.agent,
            run.command,
            run.options,
            run.emit,
            run.cancel,
            limits,
            # the agent's own environment (initializationOptions.agents, object form) over the client's
            extra_env=self._env(run),
            on_started=run.note_pid,
        )

        def one_process_attempt() -> ProcessAttempt:
            return ProcessAttempt(context, self.wait_writable, self.pool)

        conversations = self.conversations_of(run)
        if lease is None or conversations.starter.supported is False:
            return one_process_attempt()
        hooks = LiveHooks(
            retrying=run.attempt > 1,
            on_steerable=run.set_steerer,
            # a sandboxed run never falls back to a process that would not read its sandbox
            fallback=None if run.sandboxed else lambda: one_process_attempt().run(),
            on_session=lambda session_id: self._on_session(run, session_id),
            asks=self.gate.check(run) if self.gate else None,
            dialogs=self.gate.dialogs(run) if self.gate else None,
            file_ops=self.gate.file_ops(run, environ_with(self._env(run))) if self.gate else None,
            before_tools=run.before_tools,
            take_checkpoint=run.take_checkpoint,
        )
        return LiveAttempt(conversations, lease, context, hooks)

    def _on_session(self, run: Run, session_id: str) -> None:
        """The run streams on conversation `session_id`: the run notes it, the gate binds it."""
        run.note_session(session_id)
        if self.gate is not None:
            self.gate.bind(session_id, run.params.mode, hold=run.tools_held, cwd=run.options.cwd)
            settings = run.options.sandbox or sandbox.OFF
            environ = environ_with(self._env(run))
            self.gate.sandboxes.publish(session_id, settings, run.options.cwd, environ, self._env(run))

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
                outcome = _cancelled_after_failure(run, outcome)
            if outcome.status == "cancelled":
                run.cancel_receipt = outcome.shutdown
            if outcome.status != "failed" or outcome.error is None or not outcome.error.retryable:
                return outcome
            if run.attempt >= policy.max_attempts:
                return outcome
            delay_ms = backoff_delay(policy, run.attempt)
            if deadline is not None and time.monotonic() + delay_ms / 1000 >= deadline:
                return outcome
            stopped = await self._back_off(run, delay_ms, outcome.error.message)
            if stopped is not None:
                return stopped

    async def _back_off(self, run: Run, delay_ms: int, reason: str) -> AttemptOutcome | None:
        """Announce the next attempt and wait before it; the cancel's outcome if one comes."""
        run.set_state("backoff")
        run.attempt += 1
        run.emit([Out("run.retrying", {"attempt": run.attempt, "delayMs": delay_ms, "reason": reason})])
        with anyio.move_on_after(delay_ms / 1000):
            await run.cancel.wait()
        if not run.cancel.cancelled:
            return None
        receipt = _no_processes()
        run.cancel_receipt = receipt
        run.emit(run.agent.new_mapper(run.options).finish_cancelled(receipt))
        return AttemptOutcome("cancelled", "", shutdown=receipt, session_id=run.session_id)

    async def _checkpoint(
        self, run: Run, policy: RetryPolicy, lease: Lease | None
    ) -> SessionCheckpoint | None:
        """Where the run's stored session stands before its first attempt, when a retry may have
        to go back there: each one-process attempt leaves its prompt in the session (the live
        engine cuts its own back, Lease.trim)."""
        if policy.max_attempts < 2 or (
            lease is not None and self.conversations_of(run).starter.supported is not False
        ):
            return None
        adapter = run.agent
        if not isinstance(adapter, RewindsSessions):
            return None
        return await anyio.to_thread.run_sync(adapter.checkpoint_session, run.options, self._env(run))

    async def _rewind(self, run: Run, checkpoint: SessionCheckpoint | None) -> None:
        """Before a retried attempt: the session as it was before the run, so the model sees the
        earlier turns and the prompt once."""
        adapter = run.agent
        if checkpoint is None:  # the first attempt may have stored the session it was to start
            run.options = await anyio.to_thread.run_sync(
                self.stored.options_for, adapter, run.options, self._env(run)
            )
            return
        if not isinstance(adapter, RewindsSessions):
            return
        run.options = await anyio.to_thread.run_sync(
            adapter.rewind_session,
            checkpoint,
            run.session_id,
            run.options,
            self._env(run),
        )
        log.info("run %s: session %s cut back before attempt %d", run.run_id, run.session_id, run.attempt)


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
