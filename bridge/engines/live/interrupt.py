"""The cancel of a live run: pi's abort, what the run started listed for the receipt, then the
run stopped (the agent kept if it settles) and its queue read back; and the sweep after a run."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Mapping
from typing import Final

import anyio

from bridge.agents.seam import LiveCommand
from bridge.agents.values import LiveError
from bridge.contract import ShutdownReceipt
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.live_agent import LiveAgent
from bridge.process.shutdown import (
    ExactKeep,
    children_now,
    contained_besides,
    contained_now,
    members_now,
    shutdown_tree,
    started_as_now,
    stop_descendants,
)
from bridge.process.trace import mark

log = logging.getLogger(__name__)

ABORT_GRACE_SECONDS: Final = 2.0


class Interrupt:
    """How a live run is stopped while its agent stays: the cancel's stages and the sweep."""

    def __init__(self, name: str, conversations: Conversations) -> None:
        self._name = name
        self._conversations = conversations
        # Set when the cancel came: pi's abort on its way, and the run's processes then.
        self.abort: LiveCommand | None = None
        # The run's queue taken out of pi just before its abort; its texts are the cancel's `unsent`.
        self._clear: LiveCommand | None = None
        self.unsent: list[str] = []
        # Steers written to pi and not yet answered: one the cancel overtakes may land in pi's
        # queue after the clear (pi reads it first, but queues it a step later).
        self._steers_out = 0
        self._steers_answered = anyio.Event()
        self._steers_at_cancel = 0
        self._before_abort: asyncio.Future[list[int]] | None = None
        self._listed: list[int] = []
        # The agent's own helpers from before the run (its MCP servers): not the run's to sweep.
        self.helpers: dict[int, int] = {}
        # How the conversation's stdio MCP servers are started (program, arguments): the agent an
        # ACP adapter runs may start them in the run, and they are the conversation's, not the run's.
        self.mcp_argvs: tuple[tuple[str, ...], ...] = ()
        # An ACP adapter's children as the run began, when it had served a prompt before (the agent
        # it runs is started by then): one it starts during the run is the run's, for a cancel.
        self.adapter_before: ExactKeep | None = None
        # The sweep started when the agent reported its tool ended during the cancel.
        self._early_sweep: asyncio.Future[ShutdownReceipt] | None = None

    async def steer(self, agent: LiveAgent, text: str) -> str | None:
        """Hand pi a steering message, counted for the cancel; None when it took it, else why not."""
        self._steers_out += 1
        try:
            await agent.client.steer(text)
        except LiveError as exc:
            return str(exc)
        finally:
            self._steers_out -= 1
            if self._steers_out == 0:
                self._steers_answered.set()
                self._steers_answered = anyio.Event()
        return None

    def first_stage(self, agent: LiveAgent) -> None:
        """The cancel's first stage, in the call that set the token (no task to wake first): pi's
        `abort` is written, and what the run started is listed for the receipt."""
        # What the run has started, for the receipt. Its members are read before the abort goes
        # out: pi acts on the abort at once and may end them before any later look. The rest
        # (their stats, then the tree mode's token holders and adopted orphans) comes after it.
        mark("cancel.token")
        early = members_now(agent.child)
        if self.abort is None and agent.alive:
            try:
                # The queue first: an abort would leave it for the next prompt to take in.
                self._clear = agent.client.send_clear_queue_now()
                self._steers_at_cancel = self._steers_out
                self.abort = agent.client.send_abort_now()
            except LiveError as exc:
                log.info("%s's abort could not be sent: %s", self._name, exc)
        self._listed = sorted({*early, *contained_now(agent.child)})
        if agent.child.cgroup is None:  # a cgroup's listing above is whole: no pass to add
            self._before_abort = asyncio.ensure_future(contained_besides(agent.child))

    def sweep_early(self, agent: LiveAgent) -> None:
        """During a cancel, once the agent has reported its tool ended: what the run started goes
        now, as the agent winds down, so that its answer finds nothing left to wait for. An agent
        driven directly leaves such processes (a command's children its tool did not end); the
        sweep after the answer still checks, and the receipt lists both."""
        if self.abort is None or self._early_sweep is not None or not agent.alive:
            return
        self._early_sweep = asyncio.ensure_future(
            stop_descendants(agent.child, keep=self.kept(agent, cancel=True))
        )
        # retrieved here too, should the attempt end without waiting for it
        self._early_sweep.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _early_sweep_receipt(self) -> ShutdownReceipt | None:
        """What the early sweep killed (None: none ran, or it failed: the sweep after the answer
        does the work then)."""
        early = self._early_sweep
        if early is None:
            return None
        try:
            return await asyncio.shield(early)
        except Exception:
            log.exception("the early sweep of a cancelled run failed")
            return None

    def kept(self, agent: LiveAgent, *, cancel: bool = False) -> Mapping[int, int]:
        """What a sweep leaves: the agent's helpers from before the run; for an adapter that runs
        its agent as its child (an ACP adapter), its children now, and only them (the agent it
        runs may start lazily, in the run; what that agent started is swept), with the
        conversation's MCP servers that agent started."""
        if not agent.client.runs_agent_as_child:
            return self.helpers
        kept = children_now(agent.child, agent.wrappers)
        before = self.adapter_before
        if cancel and before is not None:  # a command's shell the adapter runs as its own child
            kept = ExactKeep({pid: start for pid, start in kept.items() if before.get(pid) == start})
        kept.update(started_as_now(agent.child, self.mcp_argvs, under=kept))
        return kept

    async def sweep(self, agent: LiveAgent) -> None:
        """Tools may leave daemons: whatever else the agent's tree holds after a run goes."""
        receipt = await stop_descendants(agent.child, keep=self.kept(agent))
        if receipt.pids:
            log.warning(
                "the run left %d processes under %s %d; killed %s",
                len(receipt.pids),
                self._name,
                agent.pid,
                receipt.pids,
            )

    async def stop_run(self, agent: LiveAgent) -> ShutdownReceipt:
        """Stop the run: pi's abort, then whatever the run started; pi is kept if it settled."""
        started = time.monotonic()
        kept = False
        # The run's processes under pi now (its children: cheap to find), so the receipt lists
        # what the run had started even when pi's abort stops it before the sweep looks. A
        # kept pi is not among them: it is the conversation's, and alive on purpose.
        # Both listings count: the full one runs after the abort went out, when pi may already
        # have ended what the quick one saw.
        before: set[int] = set(self._listed)
        if self._before_abort is not None:
            try:
                before |= set(await self._before_abort)
            except Exception:  # a failed scan loses pids for the receipt, never the cancel
                log.exception("the run's processes could not be listed for the receipt")
        log.info(
            "%s %d cancelled: %d of the run's processes listed as the abort went out, %d in all",
            self._name, agent.pid, len(self._listed), len(before),
        )  # fmt: skip
        if agent.alive:
            try:
                if self.abort is not None:
                    await agent.client.answer(self.abort, ABORT_GRACE_SECONDS)
                else:
                    self._clear = agent.client.send_clear_queue_now()
                    await agent.client.abort(ABORT_GRACE_SECONDS)
                kept = agent.alive
                mark("cancel.agent_answered")
            except LiveError as exc:
                log.info("%s did not settle after abort: %s", self._name, exc)
            await self._take_back_queue(agent, kept)
        early = await self._early_sweep_receipt()
        if early is not None:
            before |= set(early.pids)
        if kept:
            spared = self.kept(agent, cancel=True)
            receipt = await stop_descendants(agent.child, keep=spared)
            mark("cancel.swept")
            if receipt.survivors:
                kept = False
        if kept:
            # the agent an ACP adapter runs stays with it: it is not among what the run started
            ours = before - set(spared) if agent.client.runs_agent_as_child else before
            receipt = receipt.model_copy(
                update={
                    "stage": "interrupted",
                    "agent_kept": True,
                    "pids": sorted(ours | set(receipt.pids)),
                    "elapsed_ms": round((time.monotonic() - started) * 1000, 2),
                }
            )
        else:
            killed = await self.kill(agent)
            receipt = killed.model_copy(
                update={
                    "stage": "killed",
                    "pids": sorted(before | set(killed.pids)),
                    "elapsed_ms": round((time.monotonic() - started) * 1000, 2),
                }
            )
        return receipt

    async def _take_back_queue(self, agent: LiveAgent, settled: bool) -> None:
        """The steers and follow-ups the clear took out of pi, for the cancel's `unsent`; a steer
        that was on its way as the cancel came is waited for and cleared too, so that nothing of
        the run waits in pi's queue for the next prompt. A pi that did not settle is killed next
        (its queue goes with it): it is not waited for, only what it answered already counts."""
        clears: list[LiveCommand | None] = [self._clear]
        if settled and self._steers_at_cancel:
            if self._steers_out:
                with anyio.move_on_after(ABORT_GRACE_SECONDS):
                    await self._steers_answered.wait()
            try:
                clears.append(agent.client.send_clear_queue_now())
            except LiveError:
                pass
        for clear in clears:
            if clear is None:
                continue
            try:
                self.unsent.extend(await agent.client.unsent(clear, ABORT_GRACE_SECONDS if settled else 0.05))
            except LiveError as exc:
                log.info("%s's queue could not be read back: %s", self._name, exc)

    async def kill(self, agent: LiveAgent) -> ShutdownReceipt:
        """Stage 3: the whole tree, agent included; the conversation resumes from its file."""
        receipt = await shutdown_tree(agent.child, signal.SIGKILL, grace=0.0)
        await self._conversations.invalidate(agent)
        return receipt
