"""The spare: one live agent pre-spawned with the server defaults, so the first prompt of a new
conversation, or of a resumed one, costs no spawn (pi writes a session file only with the first
prompt, so an unused spare leaves no empty session behind)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Final

import anyio
import anyio.to_thread

from bridge.agents.values import LiveError, RunOptions
from bridge.engines.live.live_agent import (
    LiveAgent,
    LiveKey,
    LiveLaunch,
    NoLiveMode,
    StartFailure,
    canonical_cwd,
)
from bridge.engines.live.starts import Starter

log = logging.getLogger(__name__)

# A spare is primed this long after the run that took the last one ended: a Node start-up takes
# a core for a while, which a run streaming meanwhile would feel.
SPARE_PRIME_DELAY_SECONDS: Final = 0.5
# A run never waits longer for a starting spare than a spawn of its own would take.
SPARE_WAIT_SECONDS: Final = 5.0


class Spare:
    """The pre-spawned agent, the launch it is primed with, and its priming in the background."""

    def __init__(self, starter: Starter) -> None:
        self._starter = starter
        self.agent: LiveAgent | None = None
        self._pending = False
        #: A prime asked for while another was under way (a run ended while a retargeted spare
        #: still started): done when that one is settled, or the run's next spare is lost.
        self._asked_again = False
        self._ready = anyio.Event()
        self._spawning = False
        self.launch: LiveLaunch | None = None
        #: Where a new conversation ran before the first spare was primed (`retarget`): the
        #: first spare is primed like it, not like the editor's folder.
        self._ran_first: LiveLaunch | None = None
        #: Whether a folder's project trust still holds now (policy/trust/project_trust.py;
        #: blocking): a spare primed like a trusted run is started untrusted once the folder's
        #: config changed since the user trusted it, since an agent loads that config as it starts.
        self.trust_holds: Callable[[str], bool] | None = None

    def prime(
        self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str], *, delay: float = 0.0
    ) -> None:
        """Pre-spawn one agent for the next new conversation with these defaults (background)."""
        starter = self._starter
        if starter.closing:
            return
        self.launch = LiveLaunch(command, options, dict(env))
        if self._pending and self.agent is None:
            self._asked_again = True  # primed once the spare starting now is settled
            return
        if starter.tasks is None or starter.supported is False or self.agent is not None or self._pending:
            return
        self._pending = True
        starter.tasks.start_soon(self._prime, delay)

    def prime_first(self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]) -> None:
        """The first spare, for the editor's folder with the server's defaults; or like the new
        conversation that ran before it was asked for (a prompt sent with `initialized`), elsewhere."""
        ran_first, self._ran_first = self._ran_first, None
        if ran_first is not None:
            self.prime(ran_first.command, ran_first.options, ran_first.env)
        else:
            self.prime(command, options, env)

    def retarget(self, launch: LiveLaunch) -> None:
        """A new conversation the spare could not serve (another cwd, tools or agent command):
        the next spare is primed like it, since the next new conversation most likely is too.
        (Priming the old launch again would spawn a pi that the next run stops unused.)"""
        options = launch.options
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
        if self.launch is None:  # priming is off, not asked for yet, or the registry is closing
            self._ran_first = LiveLaunch(launch.command, spare_options, dict(launch.env))
            return
        self.launch = LiveLaunch(launch.command, spare_options, dict(launch.env))

    def prime_again(self, delay: float = SPARE_PRIME_DELAY_SECONDS) -> None:
        """A run took the spare or ended: prime the next one like the last, after a short wait."""
        if self.launch is not None:
            self.prime(self.launch.command, self.launch.options, self.launch.env, delay=delay)

    def pids(self) -> list[int]:
        """The pre-spawned agent, idle on purpose (listed with the warm pool's)."""
        return [self.agent.pid] if self.agent is not None and self.agent.alive else []

    def drop(self, agent: LiveAgent) -> None:
        """`agent` is gone: it is no spare any more."""
        if self.agent is agent:
            self.agent = None

    async def wait_for(self, key: LiveKey) -> None:
        """A spare like this run needs is starting: waiting for it is never slower than a spawn."""
        launch = self.launch
        if not self._spawning or launch is None or launch.key != key:
            return
        with anyio.move_on_after(SPARE_WAIT_SECONDS):
            await self._ready.wait()

    async def _prime(self, delay: float) -> None:
        self._ready = anyio.Event()
        try:
            if delay:
                await anyio.sleep(delay)
            if self.launch is None or self.agent is not None:
                return
            self._spawning = True
            launch = primed = self.launch
            holds = self.trust_holds
            if (
                launch.options.trusted
                and holds is not None
                and not await anyio.to_thread.run_sync(holds, launch.options.cwd)
            ):
                launch = replace(launch, options=replace(launch.options, trusted=False))
            try:
                spare = await self._starter.start(launch, None)
            except NoLiveMode as exc:
                self._starter.note_fallback(launch.command, str(exc))
                return
            except StartFailure as exc:
                log.info("could not pre-spawn a live agent: %s", exc)
                return
            if self.launch is None or self.launch.key == primed.key:
                self.agent = spare
            else:
                # A new conversation elsewhere retargeted the spare while this one started. The
                # next spare is primed when that conversation's run ends (or after its opening),
                # not now: a Node start-up beside its pi's first prompt took the core it needed.
                self._starter.stop_later(spare)
        finally:
            self._pending = self._spawning = False
            self._ready.set()
            if self._asked_again:
                self._asked_again = False
                self.prime_again()

    async def take_for(
        self, key: LiveKey, session_id: str | None, env: Mapping[str, str]
    ) -> LiveAgent | None:
        """The spare, if it fits: a new conversation takes it as it is; a resumed one whose
        session pi has stored loads that session into it. None: it does not fit (it is stopped
        when it cannot serve anyone any more)."""
        spare = self.agent
        if spare is None:
            return None
        stop_later = self._starter.stop_later
        if spare.key != key or not spare.alive:
            self.agent = None
            stop_later(spare)
            return None
        if session_id is None:
            self.agent = None
            log.info("live agent: took the spare (pid %d)", spare.pid)
            return spare
        cwd = canonical_cwd(spare.cwd)
        path = await anyio.to_thread.run_sync(self._starter.mode.session_file, session_id, cwd, env)
        if path is None or self.agent is not spare:
            return None  # not stored yet (started anew under its id), or taken meanwhile
        self.agent = None
        try:
            state = await spare.client.switch_session(path)
        except LiveError as exc:
            log.info("the spare could not load session %s: %s", session_id, exc)
            stop_later(spare)
            return None
        spare.take_state(state, session_id)
        if spare.session_id != session_id:
            log.info("the spare loaded session %s as %s: not used", session_id, spare.session_id)
            stop_later(spare)
            return None
        log.info("live agent: the spare (pid %d) took resumed session %s", spare.pid, session_id)
        return spare
