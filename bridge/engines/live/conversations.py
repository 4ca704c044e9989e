"""The conversation registry: sessionId -> the live agent (one long-lived process in its agent's
live mode) serving it, like a connection pool: a run leases its conversation, checks the live
agent out for each attempt, and returns or invalidates it. Nothing outlives `close`."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import anyio
import anyio.abc
import anyio.to_thread

from bridge.agents.seam import OwnOptions, ReplaysHistory
from bridge.agents.values import LiveError, OpenedConversation, RunOptions
from bridge.engines.cancel import CancelToken
from bridge.engines.live.live_agent import (
    CheckoutCancelled,
    Launcher,
    Lease,
    LiveAgent,
    LiveLaunch,
    StartFailure,
)
from bridge.engines.live.slots import Slots
from bridge.engines.live.spare import Spare
from bridge.engines.live.starts import Starter
from bridge.engines.warm_pool import tree_rss_bytes

log = logging.getLogger(__name__)

# After a conversation is opened ahead of its first prompt (ACP's session/new), the next spare
# waits this long: that first prompt usually comes within seconds.
OPENED_SPARE_PRIME_DELAY_SECONDS: Final = 3.0


class Conversations:
    """The live agents of the conversations: their slots and leases, their spare, their starts."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        max_live: int = 4,
        idle_seconds: float = 600.0,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = launcher.display_name
        live: dict[str, LiveAgent] = {}
        self.starter = Starter(launcher, live, idle_seconds=idle_seconds, wait_writable=wait_writable)
        self.slots = Slots(self.starter, live, max_live=max_live)
        self.spare = Spare(self.starter)
        self.starter.on_gone = self._forget

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the live agents' reader tasks and the idle reaper until `close`."""
        await self.starter.serve(task_status=task_status)

    async def close(self) -> None:
        """End the registry's tasks, then stop every live agent (three-stage, shielded)."""
        with anyio.CancelScope(shield=True):
            self.spare.launch = None
            # Tasks first: an agent still starting (a spare) then stops itself instead of landing
            # after the sweep below.
            self.starter.end_tasks()
            live = self.slots.live
            while agents := [
                *live.values(),
                *([self.spare.agent] if self.spare.agent else []),
                *(a for a in self.starter.starting if a.stopped is None),
            ]:
                live.clear()
                self.spare.agent = None
                for agent in agents:
                    await self.starter.stop(agent)

    def _forget(self, agent: LiveAgent) -> None:
        """Take the agent out of the registry; a conversation waiting for a slot gets its own."""
        self.slots.drop(agent)
        self.spare.drop(agent)
        self.slots.grant()

    async def resolve_session(self, options: RunOptions, env: Mapping[str, str]) -> str | None:
        """The session a run continues: its sessionId, or the newest of its cwd for continueSession
        (a glob of its folder: off the event loop)."""
        if options.session_id:
            return options.session_id
        if options.continue_session:
            return await anyio.to_thread.run_sync(self.starter.mode.latest_session_id, options.cwd, env)
        return None

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

        Raises NoLiveMode, StartFailure with the attempt's error, or CheckoutCancelled.
        """
        launch = LiveLaunch(command, options, env)
        key = launch.key
        session_id = lease.session_id
        agent = self.slots.live.get(session_id) if session_id else lease.live
        if agent is not None and agent.busy and agent is not lease.live:
            message = f"the live agent of session {session_id} is serving another run"
            raise StartFailure.retryable("busy", message)
        if agent is not None and (not agent.alive or agent.key != key or (retrying and lease.trim)):
            await self.invalidate(agent, keep_slot_for=lease)
            agent = None
        if agent is None and retrying and lease.trim is not None:
            path, mark = lease.trim
            await anyio.to_thread.run_sync(self.starter.mode.cut_session_back, path, mark)
            log.info("session %s cut back before the retried prompt", session_id)
        lease.trim = None
        if agent is None:
            if not await self.slots.reserve(lease, cancel, on_wait):
                raise CheckoutCancelled
            agent = await self._spare_or_start(launch, session_id)
            await self.slots.enter(agent, lease)
        agent.busy = True
        agent.checkouts += 1
        agent.last_used = time.monotonic()
        lease.live = agent
        lease.used_live = True
        if agent.session_id:
            self.slots.bind(lease, agent.session_id)
        return agent

    async def _spare_or_start(self, launch: LiveLaunch, session_id: str | None) -> LiveAgent:
        """The spare, when it can serve this conversation, else a new agent; with a session id."""
        await self.spare.wait_for(launch.key)
        agent = await self.spare.take_for(launch.key, session_id, launch.env)
        if agent is None:
            if session_id is None:
                self.spare.retarget(launch)
            agent = await self.starter.start(launch, session_id)
        if agent.session_id is None:
            await self.starter.stop(agent)
            raise StartFailure.retryable("session", f"the live {self.name} did not report a session id")
        return agent

    async def open(
        self, command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]
    ) -> OpenedConversation:
        """A live agent for a conversation before its first prompt, so its id is known at once.

        `options.session_id` set: the conversation resumes that session (its live agent if it has
        one); unset: a new conversation, on the spare when it fits (no spawn). Raises NoLiveMode or
        StartFailure.
        """
        launch = LiveLaunch(command, options, env)
        agent = self.slots.live.get(options.session_id) if options.session_id else None
        if agent is not None and not agent.busy and (not agent.alive or agent.key != launch.key):
            await self.invalidate(agent)
            agent = None
        if agent is None:
            slot = Lease(session_id=None)
            await self.slots.reserve(slot, None, lambda: None)
            try:
                agent = await self._spare_or_start(launch, options.session_id)
                await self.slots.enter(agent, slot)
            finally:
                self.slots.return_slot(slot)
            if options.session_id is None:
                # the next spare serves a next new conversation, rarer than this one's first
                # prompt, which a Node start-up meanwhile would slow down
                self.spare.prime_again(delay=OPENED_SPARE_PRIME_DELAY_SECONDS)
        agent.last_used = time.monotonic()
        try:
            models = await agent.client.available_models()
            levels = await agent.client.thinking_levels()
        except LiveError as exc:
            log.info("live agent pid %d: could not list its models: %s", agent.pid, exc)
            models, levels = (), []
        client = agent.client
        own = await client.agent_options() if isinstance(client, OwnOptions) else ()
        replayed = client.take_replayed() if isinstance(client, ReplaysHistory) else None
        assert agent.session_id is not None
        return OpenedConversation(
            session_id=agent.session_id,
            provider=agent.provider,
            model=agent.model,
            thinking=agent.thinking,
            models=models,
            thinking_levels=tuple(levels),
            agent_options=own,
            replayed=replayed,
        )

    async def invalidate(self, agent: LiveAgent, *, keep_slot_for: Lease | None = None) -> None:
        """The agent is gone or must go: forget it and stop its tree (idempotent). With
        `keep_slot_for`, the lease keeps its slot for the agent that replaces this one."""
        if keep_slot_for is None or not self.slots.keep_slot(agent, keep_slot_for):
            self._forget(agent)
        await self.starter.stop(agent)

    async def close_session(self, session_id: str) -> bool:
        """Stop the conversation's idle live agent; False if it has none (a busy one is the
        caller's to cancel first)."""
        agent = self.slots.live.get(session_id)
        if agent is None:
            return False
        await self.starter.let_go(agent)
        return True

    def rss_bytes(self) -> int:
        """Resident memory of the spare and the idle live agents, with their descendants."""
        idle = [agent.pid for agent in self.slots.live.values() if not agent.busy]
        return tree_rss_bytes([*self.spare.pids(), *idle])
