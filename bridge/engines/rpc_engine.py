"""The rpc engine: one attempt is one prompt to the conversation's live agent.

The attempt produces what a json-engine attempt produces (the same mapper reads the same event
lines) and exactly one terminal message, however it ends:
- the agent settles (`agent_settled`): its terminal, with the conversation's contextUsage and
  sessionCost from `get_session_stats`; whatever the run's tools left behind is swept;
- cancel: the agent's own `abort`, up to 2 s for it to settle, else the whole tree, agent
  included, is killed; either way every other process of the tree is gone before the terminal
  (`agentKept` says whether the agent serves the next prompt);
- the agent dies or closes its output: terminal.failed kind `process`, retryable, stderr tail;
  the next run resumes the conversation from its file;
- deadline or silence: the tree is killed, as in the json engine; time the bridge spends not
  reading pi (the client is behind, or a diff's read holds messages back) is not pi's silence;
- a bug in the bridge's handling of the run's output (mapping, diffing): terminal.failed kind
  `internal`, after the run is stopped as a cancel stops it (pi kept if it settles); the fault
  never reaches pi's reader, so the other conversations go on.
An agent command that does not speak rpc makes the attempt run in the json engine instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Literal, TypeVar

import anyio
import orjson

from bridge.agents.model_errors import RETRYABLE_KINDS
from bridge.agents.seam import AgentAdapter, LiveCommand
from bridge.agents.values import (
    MCP_PROMPT_ACCEPT_SECONDS,
    AskDialog,
    AskTool,
    CommandDone,
    DoFileOp,
    LiveError,
    Out,
    RunOptions,
)
from bridge.contract import ErrorInfo, ShutdownReceipt
from bridge.engines import endings
from bridge.engines.cancel import CancelToken
from bridge.engines.conversations import (
    CheckoutCancelled,
    Conversations,
    Lease,
    LiveAgent,
    NoRpc,
    StartFailure,
)
from bridge.engines.diff_capture import DiffCapture
from bridge.engines.endings import AttemptLimits, AttemptOutcome
from bridge.engines.json_engine import coalesce
from bridge.process.shutdown import (
    children_now,
    contained_besides,
    contained_now,
    helpers_now,
    members_now,
    shutdown_tree,
    stop_descendants,
    wait_exit,
)
from bridge.process.trace import mark

log = logging.getLogger(__name__)

ABORT_GRACE_SECONDS: Final = 2.0
EXIT_AFTER_EOF_SECONDS: Final = 3.0
STATS_TIMEOUT_SECONDS: Final = 2.0

Emit = Callable[[list[Out]], None]
Reason = Literal["settled", "cancel", "closed", "deadline", "silence", "refused", "internal"]
T = TypeVar("T")


class _NotTaken(Exception):
    """The agent was gone before it accepted the prompt."""


class RpcAttempt:
    """One prompt of a conversation, from checkout of its live agent to the terminal message."""

    def __init__(
        self,
        conversations: Conversations,
        lease: Lease,
        adapter: AgentAdapter,
        command: tuple[str, ...],
        options: RunOptions,
        emit: Emit,
        cancel: CancelToken,
        limits: AttemptLimits,
        *,
        extra_env: Mapping[str, str] | None = None,
        retrying: bool = False,
        on_started: Callable[[int], None] | None = None,
        on_steerable: Callable[[Callable[[str], Awaitable[str | None]] | None], None] | None = None,
        fallback: Callable[[], Awaitable[AttemptOutcome]] | None = None,
        on_session: Callable[[str], None] | None = None,
        asks: AskTool | None = None,
        dialogs: AskDialog | None = None,
        file_ops: DoFileOp | None = None,
        before_tools: anyio.Event | None = None,
        take_checkpoint: Callable[[], None] | None = None,
    ) -> None:
        self.conversations = conversations
        self.lease = lease
        self.adapter = adapter
        self.command = command
        self.options = options
        self.limits = limits
        self.cancel = cancel
        self.extra_env = dict(extra_env or {})
        self.retrying = retrying
        self.mapper = adapter.new_mapper(options)
        self.name = adapter.display_name
        self._emit = emit
        self.diffs = DiffCapture(
            adapter.file_change_watch(options.cwd), self._emit_coalesced, self._fail_inside
        )
        self._on_started = on_started
        self._on_steerable = on_steerable
        self._fallback = fallback
        self._on_session = on_session
        # The run's permission check: what the agent asks before a tool while this attempt streams.
        self._asks = asks
        # Answers the agent's own dialogs (its extensions ask the user) while this attempt streams.
        self._dialogs = dialogs
        # Does the file operations the agent's own tools hand over (the run's file access policy).
        self._file_ops = file_ops
        # Set once the workspace's checkpoint is taken: an agent that asks before a change waits
        # in the permission check; one that does not gets its prompt after it.
        self._before_tools = before_tools
        self._take_checkpoint = take_checkpoint
        self._reason: Reason | None = None
        self._stop = anyio.Event()
        self._user_messages = 0
        self._session_sent = False
        self._session_line = b""
        self._last_output = time.monotonic()
        self.agent: LiveAgent | None = None
        self.shutdown: ShutdownReceipt | None = None
        # Set when the cancel came: pi's abort on its way, and the run's processes then.
        self._abort: LiveCommand | None = None
        # The run's queue taken out of pi just before its abort; its texts are the cancel's `unsent`.
        self._clear: LiveCommand | None = None
        self.unsent: list[str] = []
        # Steers written to pi and not yet answered: one the cancel overtakes may land in pi's
        # queue after the clear (pi reads it first, but queues it a step later).
        self._steers_out = 0
        self._steers_answered = anyio.Event()
        self._steers_at_cancel = 0
        self._before_abort: asyncio.Future[list[int]] | None = None
        self._listed_at_cancel: list[int] = []
        self._helpers: dict[int, int] = {}
        # The prompt's fate before its run streams: gone before pi read it, or refused.
        self._not_taken = False
        self._lines_seen = False
        self._prompt_error: LiveError | None = None
        # A bug met while handling the run's output: the run fails with it.
        self._fault: ErrorInfo | None = None
        # What a bridge command did, and the session `/new` started.
        self._command_done: CommandDone | None = None
        self._new_session: str | None = None

    def _send(self, outs: list[Out]) -> None:
        self.diffs.send(outs)

    def _emit_coalesced(self, outs: list[Out]) -> None:
        self._emit(coalesce(outs))

    def _fail_inside(self, exc: Exception) -> None:
        """A bug in handling this run's output: the run fails with it (once), nothing else does."""
        if self._fault is None:
            pid = self.agent.pid if self.agent else None
            log.error("a run of live %s %s failed inside the bridge", self.name, pid, exc_info=exc)
            self._fault = endings.internal_error(self.name, exc)
        self._set("internal")

    def _set(self, reason: Reason) -> None:
        if self._reason is None:
            self._reason = reason
            self._stop.set()

    async def run(self) -> AttemptOutcome:
        """Run the attempt to its end; never raises for anything the agent does."""
        if self.cancel.cancelled:
            return self._cancelled_before_start()
        try:
            return await self._run_on_a_live_agent()
        finally:
            self.diffs.close()

    async def _run_on_a_live_agent(self) -> AttemptOutcome:
        # An agent that died before it took the prompt (killed while idle a moment ago) is
        # replaced once by one resuming the session: the prompt never reached it.
        for last_try in (False, True):
            agent = await self._checkout()
            if not isinstance(agent, LiveAgent):
                return agent
            self._take(agent)
            not_taken = False
            try:
                return await self._prompt(agent, last_try)
            except _NotTaken:
                not_taken = True
                log.info("live %s %d was gone before it took the prompt; resuming", self.name, agent.pid)
                await self.conversations.invalidate(agent, keep_slot_for=self.lease)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._let_go(agent, not_taken)
        raise AssertionError("unreachable")

    async def _checkout(self) -> LiveAgent | AttemptOutcome:
        """The conversation's live agent for this attempt, or how the attempt ended without one."""
        try:
            return await self._until_cancelled(
                self.conversations.checkout(
                    self.command,
                    self.options,
                    self.extra_env,
                    self.lease,
                    retrying=self.retrying,
                    cancel=self.cancel,
                    on_wait=self._waits_for_live_slot,
                )
            )
        except CheckoutCancelled:
            return self._cancelled_before_start()
        except NoRpc as exc:
            self.conversations.note_fallback(self.command, str(exc))
            if self._fallback is not None:
                return await self._fallback()
            message = f"{self.name} does not speak rpc: {exc}"
            return self._failed(ErrorInfo(kind="usage", message=message, retryable=False))
        except StartFailure as exc:
            return self._failed(exc.error)

    def _take(self, agent: LiveAgent) -> None:
        """This attempt streams on `agent` now: the run hears of its pid and session."""
        self.agent = agent
        if self._on_started is not None:
            self._on_started(agent.pid)
        if self._on_session is not None and agent.session_id:
            self._on_session(agent.session_id)
        self._reason, self._stop, self._abort = None, anyio.Event(), None
        self._not_taken = self._lines_seen = False

    async def _let_go(self, agent: LiveAgent, not_taken: bool) -> None:
        """The attempt is done with `agent`: no more lines or steers reach it, and it ends once
        its messages are out (with an unexpected end if the agent never concluded the turn)."""
        agent.rpc.listener = None
        agent.rpc.backlog = None
        agent.rpc.asks = None
        agent.rpc.dialogs = None
        agent.rpc.file_ops = None
        if self._on_steerable is not None:
            self._on_steerable(None)
        if self.mapper.last_terminal is None and not not_taken:
            self._send(self.mapper.finish_failed(endings.unexpected_end()))
        await self.diffs.drained()

    async def _until_cancelled(self, work: Awaitable[T]) -> T:
        """`work`, unless the run's cancel comes first (then CheckoutCancelled): the steps
        before the prompt is written stop at once, and the prompt is never sent."""
        with anyio.CancelScope() as scope:
            take_back = self.cancel.on_cancel(scope.cancel)
            if self.cancel.cancelled:
                scope.cancel()
            try:
                return await work
            finally:
                take_back()
        raise CheckoutCancelled

    def _waits_for_live_slot(self) -> None:
        self._send(
            [Out("run.queued", {"position": 1, "limit": self.conversations.max_live, "reason": "live"})]
        )

    async def _prompt(self, agent: LiveAgent, last_try: bool) -> AttemptOutcome:
        if not self._session_sent:
            options = dataclasses.replace(self.options, resumed=agent.history)
            self.mapper = self.adapter.new_mapper(options)
            self._session_line = orjson.dumps({"type": "session", "id": agent.session_id, "cwd": agent.cwd})
        if agent.session_file:
            mark = self.conversations.mode.session_mark(agent.session_file)
            self.lease.trim = (agent.session_file, mark)
        # The agent's own helpers from before the run (its MCP servers) are not the run's to sweep.
        self._helpers = helpers_now(agent.child) if self.options.mcp_servers else {}
        agent.rpc.listener = self._on_lines
        agent.rpc.backlog = self.diffs.drained
        agent.rpc.asks = self._asks
        agent.rpc.dialogs = self._dialogs
        agent.rpc.file_ops = self._file_ops
        prompt = await self._configure_and_send(agent, last_try)
        if isinstance(prompt, AttemptOutcome):
            return prompt
        # From here on pi has the prompt (or will, as the pipe drains): a cancel is its `abort`.
        # The session message goes out once the prompt is on its way to pi, not before it:
        # the client's first message costs the prompt nothing.
        self._announce_session()
        held = agent.rpc.take_held()
        if held:
            self._map_lines(held)
        take_back = self.cancel.on_cancel(lambda: self._cancel_now(agent))
        if self.cancel.cancelled:
            self._cancel_now(agent)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._deliver, agent, prompt, last_try)
                tasks.start_soon(self._watch_closed, agent)
                tasks.start_soon(self._watchdog, agent)
                await self._stop.wait()
                tasks.cancel_scope.cancel()
            if self._not_taken:
                raise _NotTaken
        finally:
            take_back()
            if self._on_steerable is not None:
                self._on_steerable(None)
            if not self._not_taken:
                with anyio.CancelScope(shield=True):
                    await self._conclude(agent)
        return self._outcome()

    async def _configure_and_send(
        self, agent: LiveAgent, last_try: bool
    ) -> LiveCommand | AttemptOutcome | None:
        """The run's settings given to the agent, then its prompt written (None: the run is a
        bridge command, run by `_deliver`); or how that ended.
        An agent gone before it took the prompt raises _NotTaken (unless this is the last try)."""
        try:
            await self._until_cancelled(agent.configure(self.options))
        except CheckoutCancelled:
            return self._cancelled_before_prompt()
        except LiveError as exc:
            if exc.kind == "closed" and not last_try:
                raise _NotTaken from exc
            self._announce_session()
            return await self._command_failed(agent, exc)
        if self.options.command is not None:
            return None  # a bridge command: `_deliver` runs it
        if self._before_tools is not None and not agent.rpc.asks_before_changes:
            if self._take_checkpoint is not None:
                self._take_checkpoint()
            try:
                await self._until_cancelled(self._before_tools.wait())
            except CheckoutCancelled:
                return self._cancelled_before_prompt()
        try:
            mark("engine.prompt")
            return agent.rpc.send_prompt_now(self.options.prompt, images=self.options.images)
        except LiveError as exc:
            if not last_try:
                raise _NotTaken from exc
            self._announce_session()
            return await self._command_failed(agent, exc)

    async def _deliver(self, agent: LiveAgent, prompt: LiveCommand | None, last_try: bool) -> None:
        """The prompt read and accepted by pi; then it can be steered. A refusal, a pi that does
        not read it or one that is gone ends the attempt."""
        if prompt is None:
            await self._run_command(agent)
            return
        try:
            if self.options.mcp_servers:
                accepted = await agent.rpc.delivered(prompt, MCP_PROMPT_ACCEPT_SECONDS)
            else:
                accepted = await agent.rpc.delivered(prompt)
        except LiveError as exc:
            if exc.kind == "closed" and not last_try and not self._lines_seen:
                self._not_taken = True
                self._set("closed")
                return
            self._prompt_error = exc
            self._set("refused")
            return
        if accepted.get("disposition") == "handled":
            # An extension's command consumed the prompt: no run starts, no agent_settled follows.
            self._set("settled")
            return
        if self._on_steerable is not None and self._reason is None:
            self._on_steerable(self.steer)

    async def _run_command(self, agent: LiveAgent) -> None:
        """A bridge command instead of a prompt: the agent's own command, whose answer is the
        run's text; `/new` moves the conversation's agent to the session it started."""
        command = self.options.command
        assert command is not None
        try:
            done = await agent.rpc.run_command(command)
        except LiveError as exc:
            self._prompt_error = exc
            self._set("refused")
            return
        self._command_done = done
        if done.state is not None:
            self.conversations.rebind(agent, done.state)
            if agent.session_id is not None:
                self._new_session = agent.session_id
                self._send([Out("session.started", {"sessionId": agent.session_id, "cwd": agent.cwd})])
                if self._on_session is not None:
                    self._on_session(agent.session_id)
        self._set("settled")

    def _with_command_text(self, outs: list[Out]) -> list[Out]:
        """A bridge command's answer as the run's one assistant delta, and its terminal's text."""
        done = self._command_done
        terminal = next((out for out in outs if out.type == "terminal.completed"), None)
        if done is None or terminal is None or not done.text:
            return outs
        text = str(terminal.content.get("text") or "") + done.text
        terminal.content["text"] = text
        return [Out("assistant", {"text": done.text}), *outs]

    async def steer(self, text: str) -> str | None:
        """Hand pi a steering message; None when it took it, else why not."""
        agent = self.agent
        if agent is None or self._reason is not None:
            return "the run is not streaming"
        self._steers_out += 1
        try:
            await agent.rpc.steer(text)
        except LiveError as exc:
            return str(exc)
        finally:
            self._steers_out -= 1
            if self._steers_out == 0:
                self._steers_answered.set()
                self._steers_answered = anyio.Event()
        return None

    # ------------------------------------------------------------------ the stream

    def _announce_session(self) -> None:
        """The run's session message, once, ahead of everything the agent then prints."""
        if not self._session_sent and self._session_line:
            self._session_sent = True
            self._send(self.mapper.feed(self._session_line))

    def _on_lines(self, lines: list[bytes]) -> None:
        """pi's event lines, in the batch they were read in (called by pi's reader: whatever goes
        wrong here must end this run, never the reader every conversation depends on)."""
        self._last_output = time.monotonic()
        self._lines_seen = True
        try:
            self._announce_session()
            if self._fault is not None or (self._reason is not None and self._reason != "cancel"):
                return
            self._map_lines(lines)
        except Exception as exc:
            self._fail_inside(exc)

    def _map_lines(self, lines: list[bytes]) -> None:
        outs: list[Out] = []
        mapper = self.mapper
        event_kind = self.conversations.mode.event_kind
        try:
            for line in lines:
                kind = event_kind(line)
                if kind == "settled":
                    self._set("settled")
                    continue
                if kind == "run_end":
                    # Not the end yet: steering or queued work may follow until pi has settled.
                    continue
                if kind == "user_message":
                    outs.extend(self._on_user_message(line))
                    continue
                self.diffs.note_line(line)
                outs.extend(mapper.feed(line))
            for description in self._oversized():
                mapper.note_invalid(description)
        except Exception as exc:
            self._fail_inside(exc)  # and what was mapped before it still goes out
        if self._reason == "cancel":
            # pi's abort closes the running tool as an error: to the editor it was cancelled.
            for out in outs:
                if out.type == "tool.failed":
                    out.content["cancelled"] = True
        self._send(outs)

    def _oversized(self) -> list[str]:
        framer = self.agent.rpc.framer if self.agent else None
        if framer is None or not framer.oversized:
            return []
        found = list(framer.oversized)
        framer.oversized.clear()
        framer.oversized_heads.clear()
        return found

    def _on_user_message(self, line: bytes) -> list[Out]:
        """The prompt itself, then any steering message pi took into the run."""
        self._user_messages += 1
        if self._user_messages == 1:
            return []
        text = self.conversations.mode.user_text(line)
        return [] if text is None else [Out("run.steered", {"text": text})]

    def _cancel_now(self, agent: LiveAgent) -> None:
        """The cancel's first stage, in the call that set the token (no task to wake first): pi's
        `abort` is written, and the attempt's end is recorded as a cancel before anything else
        can settle it (pi's own fast settle, a scan for the receipt)."""
        if self._reason is not None:
            return
        # What the run has started, for the receipt. Its members are read before the abort goes
        # out: pi acts on the abort at once and may end them before any later look. The rest
        # (their stats, then the tree mode's token holders and adopted orphans) comes after it.
        early = members_now(agent.child)
        if self._abort is None and agent.alive:
            try:
                # The queue first: an abort would leave it for the next prompt to take in.
                self._clear = agent.rpc.send_clear_queue_now()
                self._steers_at_cancel = self._steers_out
                self._abort = agent.rpc.send_abort_now()
            except LiveError as exc:
                log.info("%s's abort could not be sent: %s", self.name, exc)
        self._listed_at_cancel = sorted({*early, *contained_now(agent.child)})
        self._before_abort = asyncio.ensure_future(contained_besides(agent.child))
        self._set("cancel")

    async def _watch_closed(self, agent: LiveAgent) -> None:
        async with anyio.create_task_group() as tasks:

            async def exited() -> None:
                await agent.child.process.wait()
                # Let pi's last lines arrive before concluding.
                with anyio.move_on_after(0.5):
                    await agent.rpc.closed.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(exited)
            await agent.rpc.closed.wait()
            tasks.cancel_scope.cancel()
        self._set("closed")

    async def _watchdog(self, agent: LiveAgent) -> None:
        deadline = self.limits.deadline
        silence = self.limits.silence_seconds
        if deadline is None and silence is None:
            return
        rpc = agent.rpc
        while True:
            now = time.monotonic()
            waits: list[float] = []
            if deadline is not None:
                if now >= deadline:
                    self._set("deadline")
                    return
                waits.append(deadline - now)
            if silence is not None and rpc.holding_back:
                waits.append(silence)  # the bridge is not reading pi: its quiet is not pi's
            elif silence is not None:
                quiet_until = max(self._last_output, rpc.reading_since) + silence
                if now >= quiet_until:
                    self._set("silence")
                    return
                waits.append(quiet_until - now)
            await anyio.sleep(min(waits))

    # ------------------------------------------------------------------ concluding

    async def _conclude(self, agent: LiveAgent) -> None:
        reason = self._reason
        if reason == "settled":
            await self.diffs.drained()  # a diff that fails to compute fails the run, not completes it
            if self._fault is not None:
                reason = "internal"
        if reason == "settled":
            outs = self._with_command_text(self.mapper.feed(agent.rpc.run_end_line))
            await self._add_stats(agent, outs)
            self._send(outs)
            await self._sweep(agent)
            return
        if reason == "cancel":
            self.shutdown = await self._interrupt(agent)
            self._send(self.mapper.finish_cancelled(self.shutdown))
            return
        if reason == "internal":
            # pi itself is fine: its run is stopped as a cancel stops it, and it stays if it settles.
            self.shutdown = await self._interrupt(agent)
            assert self._fault is not None
            self._send(self.mapper.finish_failed(self._fault))
            return
        if reason == "closed":
            await self._died(agent)
            return
        if reason == "refused":
            assert self._prompt_error is not None
            await self._prompt_failed(agent, self._prompt_error)
            return
        receipt = await self._kill(agent)
        self.shutdown = receipt
        if reason == "deadline":
            self._send(self.mapper.finish_failed(endings.deadline_error(self.limits)))
        else:
            error = endings.silence_error(self.name, self.limits, agent.rpc.stderr.text())
            self._send(self.mapper.finish_failed(error))

    async def _add_stats(self, agent: LiveAgent, outs: list[Out]) -> None:
        terminal = next((out for out in outs if out.type == "terminal.completed"), None)
        if terminal is None:
            return
        try:
            stats = await agent.rpc.stats(STATS_TIMEOUT_SECONDS)
        except LiveError as exc:
            log.info("no session stats: %s", exc)
            return
        if stats.context is not None:
            terminal.content["contextUsage"] = {
                "tokens": stats.context.tokens,
                "contextWindow": stats.context.context_window,
                "percent": stats.context.percent,
            }
        if stats.cost is not None:
            terminal.content["sessionCost"] = stats.cost

    def _kept(self, agent: LiveAgent) -> Mapping[int, int]:
        """What a sweep leaves: the agent's helpers from before the run; for an adapter that runs
        its agent as its child (an ACP adapter), its children now, and only them (the agent it
        runs may start lazily, in the run; what that agent started is swept)."""
        return children_now(agent.child) if agent.rpc.runs_agent_as_child else self._helpers

    async def _sweep(self, agent: LiveAgent) -> None:
        """Tools may leave daemons: whatever else the agent's tree holds after a run goes."""
        receipt = await stop_descendants(agent.child, keep=self._kept(agent))
        if receipt.pids:
            log.warning(
                "the run left %d processes under %s %d; killed %s",
                len(receipt.pids),
                self.name,
                agent.pid,
                receipt.pids,
            )

    async def _interrupt(self, agent: LiveAgent) -> ShutdownReceipt:
        """Stop the run: pi's abort, then whatever the run started; pi is kept if it settled."""
        started = time.monotonic()
        kept = False
        # The run's processes under pi now (its children: cheap to find), so the receipt lists
        # what the run had started even when pi's abort stops it before the sweep looks. A
        # kept pi is not among them: it is the conversation's, and alive on purpose.
        # Both listings count: the full one runs after the abort went out, when pi may already
        # have ended what the quick one saw.
        before: set[int] = set(self._listed_at_cancel)
        if self._before_abort is not None:
            try:
                before |= set(await self._before_abort)
            except Exception:  # a failed scan loses pids for the receipt, never the cancel
                log.exception("the run's processes could not be listed for the receipt")
        log.info(
            "%s %d cancelled: %d of the run's processes listed as the abort went out, %d in all",
            self.name, agent.pid, len(self._listed_at_cancel), len(before),
        )  # fmt: skip
        if agent.alive:
            try:
                if self._abort is not None:
                    await agent.rpc.answer(self._abort, ABORT_GRACE_SECONDS)
                else:
                    self._clear = agent.rpc.send_clear_queue_now()
                    await agent.rpc.abort(ABORT_GRACE_SECONDS)
                kept = agent.alive
            except LiveError as exc:
                log.info("%s did not settle after abort: %s", self.name, exc)
            await self._take_back_queue(agent, kept)
        if kept:
            spared = self._kept(agent)
            receipt = await stop_descendants(agent.child, keep=spared)
            if receipt.survivors:
                kept = False
        if kept:
            # the agent an ACP adapter runs stays with it: it is not among what the run started
            ours = before - set(spared) if agent.rpc.runs_agent_as_child else before
            receipt = receipt.model_copy(
                update={
                    "stage": "interrupted",
                    "agent_kept": True,
                    "pids": sorted(ours | set(receipt.pids)),
                    "elapsed_ms": round((time.monotonic() - started) * 1000, 2),
                }
            )
        else:
            killed = await self._kill(agent)
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
                clears.append(agent.rpc.send_clear_queue_now())
            except LiveError:
                pass
        for clear in clears:
            if clear is None:
                continue
            try:
                self.unsent.extend(await agent.rpc.unsent(clear, ABORT_GRACE_SECONDS if settled else 0.05))
            except LiveError as exc:
                log.info("%s's queue could not be read back: %s", self.name, exc)

    async def _kill(self, agent: LiveAgent) -> ShutdownReceipt:
        """Stage 3: the whole tree, agent included; the conversation resumes from its file."""
        receipt = await shutdown_tree(agent.child, signal.SIGKILL, grace=0.0)
        await self.conversations.invalidate(agent)
        return receipt

    async def _died(self, agent: LiveAgent) -> None:
        exited = await wait_exit(agent.child, EXIT_AFTER_EOF_SECONDS)
        stderr = agent.rpc.stderr.text()
        if not exited:
            self.shutdown = await self._kill(agent)
            self._send(self.mapper.finish_failed(endings.kept_running_error(self.name, stderr)))
            return
        await self.conversations.invalidate(agent)
        code, signal_name = endings.exit_status(agent.child.returncode)
        outs = self.mapper.finish_exited(code, signal_name, stderr)
        self._send(outs)

    async def _command_failed(self, agent: LiveAgent, exc: LiveError) -> AttemptOutcome:
        """A command before the prompt's run (configure, the prompt itself) failed."""
        if exc.kind == "closed":
            self._reason = "closed"
        await self._prompt_failed(agent, exc)
        return self._outcome()

    async def _prompt_failed(self, agent: LiveAgent, exc: LiveError) -> None:
        if exc.kind == "closed":
            await self._died(agent)
            return
        if exc.kind == "timeout":
            self.shutdown = await self._kill(agent)
            error = ErrorInfo(
                kind="stalled",
                message=f"{exc}; {self.name} was stopped",
                retryable=True,
                stderr=agent.rpc.stderr.text() or None,
            )
        elif exc.kind == "refused" and exc.error_kind is not None:
            # the agent's words say what is wrong (no key: `auth`); the same again would not help
            # unless the kind is one worth retrying
            error = ErrorInfo(
                kind=exc.error_kind, message=str(exc), retryable=exc.error_kind in RETRYABLE_KINDS
            )
        elif self.options.command is not None and exc.kind == "refused":
            # the agent cannot do the command now ("nothing to compact"): the same again would not
            error = ErrorInfo(kind="usage", message=str(exc), retryable=False)
        else:
            model_refused = exc.command == "set_model"
            error = ErrorInfo(
                kind="model_not_found" if model_refused else "busy",
                message=str(exc),
                retryable=not model_refused,
            )
        self._send(self.mapper.finish_failed(error))

    # ------------------------------------------------------------------ outcome

    def _failed(self, error: ErrorInfo) -> AttemptOutcome:
        self._send(self.mapper.finish_failed(error))
        return self._outcome()

    def _cancelled_before_start(self) -> AttemptOutcome:
        self.shutdown = endings.not_started()
        self._send(self.mapper.finish_cancelled(self.shutdown))
        return self._outcome()

    def _cancelled_before_prompt(self) -> AttemptOutcome:
        """Cancelled while its live agent was being configured: the prompt was never sent, and
        the agent stays for the conversation."""
        receipt = endings.not_started().model_copy(update={"agent_kept": True})
        self.shutdown = receipt
        self._announce_session()
        self._send(self.mapper.finish_cancelled(receipt))
        return self._outcome()

    def _outcome(self) -> AttemptOutcome:
        agent = self.agent
        kept = agent is not None and agent.stopped is None and agent.alive
        outcome = endings.outcome_of(
            self.mapper, self.shutdown, agent.pid if agent else None, agent_kept=kept
        )
        if self.unsent and outcome.status == "cancelled":
            outcome = dataclasses.replace(outcome, unsent=tuple(self.unsent))
        if self._new_session is not None:
            outcome = dataclasses.replace(outcome, session_id=self._new_session)
        return outcome
