"""Start and reap: live agents spawned and prepared, watched while they live, stopped when idle
too long, and every one of them stopped through the three-stage shutdown."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Final

import anyio
import anyio.abc
import anyio.to_thread

from bridge.agents.seam import LiveMode
from bridge.agents.values import LaunchSpec, LiveError
from bridge.contract import ErrorInfo, ShutdownReceipt
from bridge.engines.live.live_agent import Launcher, LiveAgent, LiveLaunch, NoLiveMode, StartFailure
from bridge.process import bwrap
from bridge.process.shutdown import shutdown_tree, wait_exit
from bridge.process.spawn import SpawnError, forget, spawn

log = logging.getLogger(__name__)

REAP_INTERVAL_SECONDS: Final = 1.0
# Sessions opened here whose file pi has not written yet: a bound, so a client opening session
# after session never grows the set without end.
MAX_OPENED_SESSIONS: Final = 4096


def shutting_down() -> StartFailure:
    """No agent starts once the registry stops serving."""
    return StartFailure(ErrorInfo(kind="internal", message="the bridge is shutting down", retryable=False))


class Starter:
    """Starts the live agents, owns their reader tasks and the idle reaper, and stops them."""

    def __init__(
        self,
        launcher: Launcher,
        live: dict[str, LiveAgent],
        *,
        idle_seconds: float,
        wait_writable: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.launcher = launcher
        self.name = launcher.display_name
        self.live_mode = launcher.live_mode()
        self.idle_seconds = idle_seconds
        self.wait_writable = wait_writable
        self.supported: bool | None = None
        #: Set while a start finds out whether the agent has a live mode (see `start`).
        self._probe: anyio.Event | None = None
        self._fallback_logged = False
        # The conversations' agents (the slots' table): the reaper closes the idle ones.
        self._live = live
        self.starting: set[LiveAgent] = set()  # spawned, not yet answering: no one else holds them
        # Sessions a live agent of this bridge opened and pi may not have written yet: only those
        # may be started anew under their id (any other unknown id is the client's error).
        self.opened: OrderedDict[str, None] = OrderedDict()
        # Called when an agent goes on its own (closed while idle, reaped): the pool forgets it.
        self.on_gone: Callable[[LiveAgent], None] = lambda agent: None
        self.tasks: anyio.abc.TaskGroup | None = None
        self.closing = False

    @property
    def mode(self) -> LiveMode:
        """The agent's live mode; raises NoLiveMode when it has none."""
        if self.live_mode is None:
            raise NoLiveMode(f"{self.name} has no live mode")
        return self.live_mode

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the live agents' reader tasks and the idle reaper until `end_tasks`."""
        async with anyio.create_task_group() as tasks:
            self.tasks = tasks
            task_status.started()
            while True:
                await anyio.sleep(REAP_INTERVAL_SECONDS)
                await self._reap_idle()

    def end_tasks(self) -> None:
        """No more starts; the tasks end, so an agent still starting stops itself."""
        self.closing = True
        if self.tasks is not None:
            self.tasks.cancel_scope.cancel()
            self.tasks = None

    def note_fallback(self, command: tuple[str, ...], reason: str) -> None:
        """The command has no live mode: every later run uses the one-process engine (logged once)."""
        self.supported = False
        if not self._fallback_logged:
            self._fallback_logged = True
            log.warning(
                "%s does not speak its rpc mode (%s); running each prompt on the json engine instead",
                " ".join(command),
                reason,
            )

    def opened_add(self, session_id: str) -> None:
        """A session this bridge opened: until pi writes it, a restart starts it anew under its id."""
        self.opened[session_id] = None
        self.opened.move_to_end(session_id)
        while len(self.opened) > MAX_OPENED_SESSIONS:
            self.opened.popitem(last=False)

    # ------------------------------------------------------------------ starting

    async def start(self, launch: LiveLaunch, session_id: str | None) -> LiveAgent:
        """A new live agent, prepared; raises NoLiveMode or StartFailure.

        Until the agent is known to have a live mode, one start at a time finds out: another
        (the spare and a run, started together) waits for its answer instead of a probe of its own."""
        if self.supported is None and self._probe is not None:
            await self._probe.wait()
        if self.supported is not None:
            return await self._start(launch, session_id)
        self._probe = probe = anyio.Event()
        try:
            return await self._start(launch, session_id)
        except NoLiveMode:
            self.supported = False
            raise
        finally:
            self._probe = None
            probe.set()

    async def _start(self, launch: LiveLaunch, session_id: str | None) -> LiveAgent:
        command, options, env = launch.command, launch.options, launch.env
        if self.closing or self.tasks is None:
            raise shutting_down()
        mode = self.mode
        if self.supported is False:
            # Known since this run was leased (the spare it waited for found it out): no second probe.
            raise NoLiveMode(f"{' '.join(command)} does not speak its live mode")
        launch_options = replace(options, session_id=session_id, continue_session=False)
        stored = session_id is not None and await anyio.to_thread.run_sync(
            mode.session_stored, session_id, options.cwd, env
        )
        if session_id in self.opened and not stored:
            # pi had not written the session yet (its first prompt failed, was cancelled or pi
            # died first): start it anew under the same id, so the conversation keeps its id.
            log.info("%s: session %s is not stored yet: started anew under its id", self.name, session_id)
            spec: LaunchSpec = mode.launch_spec(
                command, replace(launch_options, session_id=None), new_session_id=session_id
            )
        else:
            spec = mode.launch_spec(command, launch_options)
        try:
            child = await spawn(spec.argv, spec.cwd, {**env, **spec.env})
        except SpawnError as exc:
            raise StartFailure(self.launcher.spawn_failure(command, str(exc))) from exc
        client = mode.client(child, wait_writable=self.wait_writable)
        agent = LiveAgent(
            key=launch.key,
            child=child,
            client=client,
            cwd=options.cwd,
            provider=options.provider,
            model=options.model,
            thinking=options.thinking,
            wrappers=bwrap.WRAPPERS if options.launch_prefix else 0,
        )
        self.starting.add(agent)
        try:
            if self.closing or self.tasks is None:
                # close() began while it spawned: it is stopped here, since its sweep is over
                raise shutting_down()
            self.tasks.start_soon(self._watch, agent)
            state = await agent.client.prepare()
        except LiveError as exc:
            await self._start_failed(agent, mode, exc)
            raise AssertionError("unreachable") from exc
        except BaseException:
            # Cancelled while pi started (a spare primed just as the bridge stops, a run
            # cancelled in its checkout): nobody holds this agent yet, so stop it here.
            await self.stop(agent)
            raise
        finally:
            self.starting.discard(agent)
        self.supported = True
        agent.take_state(state, session_id)
        log.info("live agent pid %d up for session %s", child.pid, agent.session_id)
        return agent

    async def _start_failed(self, agent: LiveAgent, mode: LiveMode, exc: LiveError) -> None:
        if exc.kind == "closed":
            await wait_exit(agent.child, 3.0)
        code = agent.child.returncode
        await self.stop(agent)
        stderr = agent.client.stderr.text()
        signal_name = None
        if code is not None and code < 0:
            signal_name = f"signal {-code}"
            code = None
        if exc.kind == "closed" and mode.lacks_live_mode(stderr):
            raise NoLiveMode(f"it exited (code {code}) saying so: {' '.join(stderr.split())[-200:]}") from exc
        if (
            exc.kind == "timeout"
            and self.supported is not True
            and agent.client.lines_read == 0
            and mode.silence_may_mean_no_live_mode()
        ):
            # Alive, silent, never answering: an agent that reads stdin for something else
            raise NoLiveMode(f"it never answered its first command ({exc})") from exc
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
                await agent.client.serve()
            except Exception:
                log.exception("the reader of live agent pid %d failed; the agent is stopped", agent.pid)
                await self.let_go(agent)
                return
            if agent.busy:
                return  # its attempt sees it close
            # A stop of the bridge's own (a spare retargeted as it started) closes it too: no news.
            if not agent.stop_lock.locked() and agent.stopped is None:
                said = " ".join(agent.client.stderr.text().split())[-300:]
                log.warning(
                    "live agent pid %d of session %s closed its output%s",
                    agent.pid,
                    agent.session_id,
                    f", saying: {said}" if said else "",
                )
            await self.let_go(agent)

    # ------------------------------------------------------------------ stopping

    async def let_go(self, agent: LiveAgent) -> None:
        """The pool forgets the agent, then its tree is stopped."""
        self.on_gone(agent)
        await self.stop(agent)

    def stop_later(self, agent: LiveAgent) -> None:
        """Stop an agent nobody holds, in the background (now, if the registry no longer serves)."""
        if self.tasks is not None:
            self.tasks.start_soon(self.stop, agent)
        else:
            self.starting.add(agent)  # close() stops what is left here

    async def stop(self, agent: LiveAgent) -> ShutdownReceipt:
        """Three-stage stop of the agent's whole tree: stdin EOF and SIGTERM, 2 s, then kill."""
        with anyio.CancelScope(shield=True):
            async with agent.stop_lock:
                if agent.stopped is not None:
                    return agent.stopped
                agent.client.close_stdin()
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
                await self.let_go(agent)
