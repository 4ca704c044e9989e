"""Run orchestration: the registry of live runs: start, list, cancel, steer, stop."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import ValidationError

from bridge import contract
from bridge.agents import seam, values
from bridge.agents.values import RunOptions
from bridge.checkpoints.recorder import Checkpoints
from bridge.config import BridgeConfig
from bridge.contract import (
    CancelledRunData,
    CancelResult,
    EffectiveSettings,
    ErrorInfo,
    RunResult,
    RunsResult,
    SandboxAvailability,
    SandboxSettings,
    SteerResult,
)
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.live_agent import NoLiveMode, StartFailure
from bridge.engines.stored_conversations import StoredConversations
from bridge.engines.warm_pool import WarmPool
from bridge.policy import sandbox, shell_words
from bridge.policy.gate import Gate
from bridge.policy.redact import (
    BOOK,
    SCRUB_NAMES_ENV,
    SECRET_NAMES_ENV,
    Redactor,
    header_secrets,
    mask_in_logs,
    scrubbed_names,
    secret_env_names,
    secrets_env,
)
from bridge.policy.rule_store import state_dir
from bridge.process import spawn
from bridge.runs.agent_choice import AgentChoice, AgentChoiceError
from bridge.runs.attempts import Attempts, whole_process_prefix
from bridge.runs.commands import CommandUsageError, bridge_command, export_path
from bridge.runs.mcp_config import McpConfigFiles, McpServers, secrets_of
from bridge.runs.request import RunRequest
from bridge.runs.run import DuplicateRunError, Run, Sink
from bridge.runs.session_record import SessionRecord

log = logging.getLogger(__name__)

#: A prompt this long (or longer) has its run's memory collected when the run ends.
BIG_PROMPT_CHARS: Final = 1024 * 1024

__all__ = [
    "AgentAdapter",
    "AgentChoiceError",
    "AgentOption",
    "BridgeConfig",
    "CommandUsageError",
    "DuplicateRunError",
    "NoLiveMode",
    "OpenFailure",
    "OpenedConversation",
    "Run",
    "RunRegistry",
    "ShuttingDownError",
    "Sink",
    "effective_settings",
]

#: A conversation opened ahead of its first prompt, as the fronts see it.
OpenedConversation = values.OpenedConversation
#: One of an agent's own options (an ACP agent's mode or config option), as the fronts see it.
AgentOption = values.AgentOption
#: The agent a front serves (the fronts hold it, and hand it to the registry).
AgentAdapter = seam.AgentAdapter


class ShuttingDownError(RuntimeError):
    """The registry no longer serves: the bridge is on its way out."""


class OpenFailure(Exception):
    """A conversation's live agent could not be started or configured; carries the error (masked)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


#: The models a first answer, cancel or approval would otherwise build on its way to the client.
_HOT_MODELS: Final = (
    contract.RunResult,
    contract.CancelledRunData,
    contract.CancelResult,
    contract.RequestPermissionParams,
    contract.RequestPermissionAnswer,
    contract.PermissionRequestedContent,
    contract.PermissionResolvedContent,
)


def _build_hot_validators() -> None:
    """Validate a sample of each params model a prompt or a cancel reads: that builds its
    validator (a failed validation does too); and build `_HOT_MODELS`."""
    for model in (contract.RunParams, contract.CancelParams, contract.SteerParams):
        try:
            model.model_validate({"prompt": "", "runId": "warm"})
        except ValidationError:
            pass
    for built in _HOT_MODELS:
        built.model_rebuild()


def _build_off_the_path(prepare_sandboxes: Callable[[], None], checks_commands: bool) -> None:
    """What a first prompt, cancel or checked tool call would otherwise build on its way: the
    wire's hot validators, what the sandbox learns of bwrap, and, when conversations start in a
    mode that checks commands, the rules' shell parser (a bridge in `full` may never need it,
    and its import costs every bridge that much CPU at start)."""
    _build_hot_validators()
    prepare_sandboxes()
    if checks_commands:
        shell_words.prepare()


class RunRegistry:
    """Starts, lists, cancels and stops runs; owns the task group that holds them."""

    def __init__(
        self,
        adapter: AgentAdapter,
        config: BridgeConfig,
        sink: Sink,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.adapter = adapter
        # Every conversation's mode and the check of each tool call (policy/gate.py): the front's,
        # which it reaches through its own FrontPolicy, not through the registry.
        self.gate = gate if gate is not None else Gate(config.default_mode or "full")
        self.checkpoints = Checkpoints(state_dir(os.environ), self.spawn_background)
        config = _gated(config, self.gate)
        self.config = config
        mask_in_logs(config.env)
        self._sink = sink
        # The private files listing each conversation's MCP servers (mcp_config.py).
        self.mcp_files = McpConfigFiles(state_dir(os.environ))
        record = SessionRecord.in_dir(state_dir(os.environ))  # the sessions opened on ACP agents
        self.agents = AgentChoice(adapter, config, record, self.spawn_background)
        self.gate.sandboxes.agent_secrets = self.agents.secret_files
        self.gate.sandboxes.agent_config = self.agents.config_paths
        self._learn_secrets(config)
        self._wait_writable = wait_writable
        self._runs: dict[str, Run] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        # Each run's task. Not in the task group: spawning there delays a follow-up prompt
        # before pi gets it, and a run is never stopped by cancelling its task anyway: its cancel
        # token stops it, with a cleanup nothing interrupts (stop_all, when serving ends).
        self._run_tasks: set[asyncio.Task[None]] = set()
        self._closing = anyio.Event()
        self._stopping = False
        self.pool = WarmPool(enabled=config.warm_pool, ttl=config.warm_pool_ttl_seconds)
        self.conversations = Conversations(
            adapter,
            max_live=config.max_live_sessions,
            idle_seconds=config.session_idle_seconds,
            wait_writable=self._writable,
        )
        self.conversations.spare.trust_holds = lambda cwd: self.gate.trust.trusted_now(
            cwd, adapter, self.config.env
        )
        # The conversations of agents with no live mode (their sessions, resumed per prompt).
        self.stored = StoredConversations()
        self.attempts = Attempts(
            adapter,
            config,
            self._runs,
            self.pool,
            self.conversations,
            self.stored,
            may_prime=lambda: not (self._closing.is_set() or self._stopping),
            wait_writable=wait_writable,
            gate=self.gate,
            checkpoints=self.checkpoints,
        )

    def _learn_secrets(self, config: BridgeConfig) -> None:
        """Tell the last line (redact.BOOK) the client's and the agents' secrets and auth files."""
        _learn_env_secrets(config)
        BOOK.watch_files(self.agents.secret_files({**os.environ, **config.env}))

    @property
    def wait_writable(self) -> Callable[[], Awaitable[None]] | None:
        """What a run's messages wait on before they are written (the client's backpressure)."""
        return self._wait_writable

    @wait_writable.setter
    def wait_writable(self, wait: Callable[[], Awaitable[None]] | None) -> None:
        self._wait_writable = wait
        self.attempts.wait_writable = wait

    async def _writable(self) -> None:
        if self._wait_writable is not None:
            await self._wait_writable()

    # ------------------------------------------------------------------ agents

    def spawn_background(self, work: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run `work` in the registry's task group (ended with it); False if not serving."""
        if self._tasks is None:
            return False
        self._tasks.start_soon(work)
        return True

    async def prepare_first_prompt(self) -> None:
        """Build while the spare agent boots: every agent's adapter (see AgentChoice), then what
        `_build_off_the_path` builds; then freeze what the start built out of the garbage
        collector's full passes."""
        await self.agents.prepare_first_prompt()
        checks = self.gate.default_mode != "full"
        await anyio.to_thread.run_sync(_build_off_the_path, self.gate.sandboxes.prepare, checks)
        gc.freeze()  # a full collection walks only what comes after, not the start's whole heap

    @staticmethod
    def sandbox_availability() -> SandboxAvailability:
        """Whether runs can ask for a sandbox here (initialize says it)."""
        return sandbox.availability()

    def reconfigure(self, config: BridgeConfig) -> None:
        """Apply settings from initialize (before any run starts). Without a `defaultMode`, a front
        that can ask the user (its approver is set) starts each conversation in `ask`."""
        self.gate.default_mode = config.default_mode or ("ask" if self.gate.approver else "full")
        config = _gated(config, self.gate)
        self.config = config
        mask_in_logs(config.env)  # the agents get these: what they print may show them
        self.agents.config = config
        self._learn_secrets(config)
        self.attempts.reconfigure(config)
        self.pool.enabled = config.warm_pool
        self.pool.ttl = config.warm_pool_ttl_seconds
        self.conversations.slots.max_live = config.max_live_sessions
        self.conversations.starter.idle_seconds = config.session_idle_seconds
        self.checkpoints.enabled = config.checkpoints

    def prime_live(self, default_cwd: str) -> None:
        """After `initialized`: pre-spawn one live agent with the server defaults (live engine)."""
        config = self.config
        if config.engine != "rpc" or not config.warm_pool or self.agents.default_agent() != self.adapter.name:
            return
        if self.adapter.live_mode() is None:
            return
        env = config.env_of(self.adapter.name)
        options = self._with_mcp(
            RunOptions(
                prompt="",
                cwd=default_cwd,
                provider=config.default_provider,
                model=config.default_model,
                # a trust that still holds (a few stat calls, once)
                trusted=self.gate.trust.trusted_now(default_cwd, self.adapter, env),
            ),
            None,
        )
        self.conversations.spare.prime_first(config.command, options, env)

    def _with_mcp(self, options: RunOptions, servers: McpServers | None) -> RunOptions:
        """`options` with the conversation's MCP servers (None: the configured defaults), their
        file written, and their secrets masked in every later log line."""
        chosen = tuple(servers if servers is not None else self.config.mcp_servers)
        if not chosen:
            return options
        secrets = secrets_of(chosen)
        if secrets:
            mask_in_logs(secrets_env(secrets))
            BOOK.add_values(header_secrets(secrets))
        return dataclasses.replace(options, mcp_servers=chosen, mcp_config=self.mcp_files.file_for(chosen))

    def _redactor(self, options: RunOptions) -> Redactor:
        """Masks the secrets of the bridge's and the agents' environment, and of the MCP servers."""
        BOOK.check_files(force=True)  # the auth files, read again if changed: a key rotated between turns
        return Redactor(os.environ, self.config.env, secrets_env(secrets_of(options.mcp_servers)))

    async def open_conversation(
        self,
        cwd: str,
        session_id: str | None = None,
        mcp_servers: McpServers | None = None,
        box: Box = None,
        agent: AgentAdapter | None = None,
    ) -> OpenedConversation:
        """Open a conversation of `agent` (default: the server's own) ahead of its first prompt:
        a new one (on the spare), or `session_id` resumed, with `mcp_servers` (None: the configured
        ones), in its prompts' sandbox `box`. Raises OpenFailure or NoLiveMode. An agent with no
        live mode gets a conversation of per-prompt runs (stored_conversations.py)."""
        self.checkpoints.prepare(cwd)  # the workspace's first snapshot, off the first prompt's path
        config, adapter = self.config, agent or self.adapter
        if adapter.live_mode() is None or not (adapter is self.adapter or self.attempts.is_live(adapter)):
            opened = self.stored.open(session_id, config.default_provider, config.default_model)
            self.agents.remember(opened.session_id, adapter.name, cwd)
            return opened
        env = config.env_of(adapter.name)
        options = RunOptions(
            prompt="",
            cwd=cwd,
            provider=config.default_provider,
            model=config.default_model,
            session_id=session_id,
            resumed=session_id is not None,
            # the decision the user made already; the first prompt asks when there is none
            trusted=await anyio.to_thread.run_sync(self.gate.trust.trusted_now, cwd, adapter, env),
        )
        options = await _in_sandbox(self, self._with_mcp(options, mcp_servers), box)
        conversations = await self.attempts.open_conversations(adapter)
        try:
            command = config.command if adapter is self.adapter else self.agents.command_of(adapter)
            opened = await conversations.open(command, options, env)
        except StartFailure as exc:  # it leaves the bridge: the agent's stderr masked, as a run's error is
            error = self._redactor(options).error(exc.error.model_dump(by_alias=True))
            raise OpenFailure(ErrorInfo.model_validate(error)) from None
        self.agents.remember(opened.session_id, adapter.name, cwd)
        return opened

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the runs' task group until `close`; runs still live then are stopped first."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                await tasks.start(self.pool.serve)
                await tasks.start(self.conversations.serve)
                self.attempts.tasks = tasks  # serves the conversations of other live agents
                task_status.started()
                await self._closing.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.stop_all("the bridge is shutting down")
                self.gate.close()
                self.mcp_files.remove()
        self._tasks = None

    def close(self) -> None:
        """Let `serve` return once every run has ended."""
        self._closing.set()

    @staticmethod
    def adopt_orphans() -> bool:
        """Make this process a child subreaper (Linux): what a run's tools orphan comes back to it,
        where a stop finds it; whether it is one. (`reap_orphans` collects them once dead.)"""
        return spawn.become_subreaper()

    @staticmethod
    def reap_orphans() -> None:
        """Collect the exit status of the dead orphans this process adopted (else: zombies)."""
        spawn.reap_orphans()

    def has_live_run(self, session_id: str) -> bool:
        """Whether a run of this conversation is live now."""
        return any(session_id in (run.session_id, run.options.session_id) for run in self._runs.values())

    def is_live_session(self, session_id: str) -> bool:
        """Whether a conversation of this session has a live agent now (none in the one-process engine)."""
        return any(c.slots.live_agent(session_id) is not None for c in self.attempts.every_conversations())

    # ------------------------------------------------------------------ requests

    def start(
        self, params: RunRequest, default_cwd: str, on_done: Callable[[Run], None] | None = None
    ) -> Run:
        """Register and start a run; raises DuplicateRunError for a live runId. `on_done` is
        called with the run once it has its answer, before waiters on `run.done` go on."""
        if self._tasks is None or self._stopping:
            raise ShuttingDownError("the bridge is shutting down: no run starts")
        run_id = params.run_id or f"run-{os.urandom(6).hex()}"
        if run_id in self._runs:
            raise DuplicateRunError(f"runId {run_id!r} is already live")
        cwd = params.cwd or default_cwd
        adapter = self.agents.choose(params, cwd)
        command = bridge_command(params.prompt)  # CommandUsageError: the client's to fix
        if command is not None and command.name == "export":
            command = dataclasses.replace(command, export_path=export_path(run_id))
        # A live conversation's agent knows whether it has history (the live engine asks it): no
        # look through the session files on the hot path of a follow-up prompt.
        session_id = params.session_id
        live = session_id is not None and self.conversations.slots.live_agent(session_id) is not None
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
            command=command,
            sandbox=sandbox.settings_of(params.sandbox, self.config.sandbox),
        )
        options = self._with_mcp(options, params.mcp_servers)
        options = self.stored.options_for(adapter, options, self.config.env)
        run = Run(
            run_id=run_id,
            params=params,
            options=options,
            sink=self._sink,
            redactor=self._redactor(options),
            adapter=adapter,
            command=self.agents.command_of(adapter),
            on_done=on_done,
        )
        self._runs[run_id] = run
        # By a weak reference: the cancel token may outlive the run (an agent kept for the
        # conversation holds it), and the run holds its prompt, however big.
        this_run = weakref.ref(run)
        run.cancel.on_cancel(lambda: self._stop_runs_behind(this_run))
        task = asyncio.get_running_loop().create_task(self._drive(run), name=f"run {run_id}")
        self._run_tasks.add(task)
        task.add_done_callback(self._run_tasks.discard)
        if len(params.prompt) >= BIG_PROMPT_CHARS:
            task.add_done_callback(_collect_cycles)
        return run

    def _stop_runs_behind(self, this_run: weakref.ref[Run]) -> None:
        """A stopped run takes the runs queued behind it in its conversation along: the user
        pressed Stop on that conversation, so nothing already sent to it goes on afterwards.
        Their prompts join the stopped run's `unsent`, in the order they were sent."""
        run = this_run()
        if run is None:
            return
        session = run.session_id or run.options.session_id
        if session is None or run.waits_for is not None:
            return  # a run still waiting in line holds nothing up: the others wait for the first
        behind = [other for other in self._runs.values() if other is not run and other.waits_for == session]
        for other in behind:
            other.waits_for = None
            run.unsent_behind.append(other.params.prompt)
        for other in behind:
            other.cancel.cancel(f"the run before it in its conversation ({run.run_id}) was stopped")

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
        unsent = run.answer.unsent if isinstance(run.answer, CancelledRunData) else None
        return CancelResult(run_id=run_id, found=True, shutdown=run.cancel_receipt, unsent=unsent)

    def list(self) -> RunsResult:
        """The live runs, the idle pre-spawned agents and the live conversations."""
        return RunsResult(
            runs=[run.info() for run in self._runs.values()],
            warm_pids=[*self.pool.warm_pids(), *self.conversations.spare.pids()],
            warm_rss_bytes=self.pool.rss_bytes() + self.conversations.rss_bytes(),
            live=[entry for each in self.attempts.every_conversations() for entry in each.slots.listing()],
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
        every = self.attempts.every_conversations()  # and those of agents runs named
        return any([await conversations.close_session(session_id) for conversations in every])

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
            for conversations in self.attempts.every_conversations():
                await conversations.close()
            strays = await spawn.end_strays()
            if strays:
                log.warning("stopped %d process(es) no run held: pids %s", len(strays), strays)

    # ------------------------------------------------------------------ driving a run

    async def _drive(self, run: Run) -> None:
        try:
            await self.attempts.drive(run)
        except Exception as exc:  # the bridge must survive anything a run does
            log.exception("run %s crashed inside the bridge", run.run_id)
            error = ErrorInfo(kind="internal", message=f"internal error: {exc}", retryable=False)
            run.answer = RunResult(
                run_id=run.run_id, status="failed", text="", attempts=run.attempt, error=error
            )
        finally:
            self._runs.pop(run.run_id, None)
            if run.on_done is not None:
                try:
                    run.on_done(run)
                except Exception:  # an answer that cannot be sent must not keep the run open
                    log.exception("run %s: its answer could not be sent", run.run_id)
            if run.session_id and run.adapter is not None:  # no await from the answer to `done`
                self.agents.remember(run.session_id, run.adapter.name, run.options.cwd, run.params.prompt)
            run.keep_books()
            run.done.set()


def _collect_cycles(_task: asyncio.Task[None]) -> None:
    """Collect the cycles a finished run leaves, soon: a run ends as cycles of its own objects
    (the run, its attempts, the closures the gate and the engines hold), which the collector's
    next full pass would free at a time of its choosing, a big prompt with them."""
    asyncio.get_running_loop().call_soon(gc.collect)


def effective_settings(config: BridgeConfig) -> EffectiveSettings:
    """The settings in force, as the initialize answer reports them."""
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


def _gated(config: BridgeConfig, gate: Gate) -> BridgeConfig:
    """`config` with the environment every agent gets telling its gate where the modes are,
    and its extension which of the client's variables hold secrets (names only: the values
    are in its own environment already)."""
    client = _client_env(config)
    names = {
        SECRET_NAMES_ENV: ",".join(secret_env_names(client)),
        SCRUB_NAMES_ENV: ",".join(scrubbed_names(client)),
    }
    return dataclasses.replace(config, env={**config.env, **gate.agent_env(), **names})


def _learn_env_secrets(config: BridgeConfig) -> None:
    """The client's secrets and those of each agent's own environment (the object form of
    initializationOptions.agents), for the last line and the logs."""
    BOOK.add_env(_client_env(config), client=True)
    for env in config.agent_envs.values():
        mask_in_logs(env)


def _client_env(config: BridgeConfig) -> dict[str, str]:
    """The environment the client gave the agents (initializationOptions.env, and each agent's
    own in initializationOptions.agents: pi's bash tool gets none of its names either), without
    the bridge's own variables."""
    given = {**config.env}
    for env in config.agent_envs.values():
        given.update(env)
    return {name: value for name, value in given.items() if not name.startswith("PI_BRIDGE_")}


#: A conversation's sandbox as its opener gives it (None: the configured one).
Box = SandboxSettings | None


async def _in_sandbox(registry: RunRegistry, options: RunOptions, box: Box) -> RunOptions:
    """`options` of an agent that runs its own tools started in its prompts' sandbox (`box`, else
    the configured one), so the conversation's first prompt needs no new process."""
    settings = sandbox.settings_of(box, registry.config.sandbox)
    env = registry.config.env_of(registry.adapter.name)
    args = (registry.gate, registry.adapter, settings, options.cwd, env)
    prefix = await anyio.to_thread.run_sync(whole_process_prefix, *args)
    return dataclasses.replace(options, launch_prefix=prefix)
