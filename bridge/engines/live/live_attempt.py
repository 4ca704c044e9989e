"""The live engine: one attempt is one prompt to the conversation's live agent, and it ends with
exactly one terminal message, however it ends (docs/architecture.md lists the endings)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import anyio

from bridge.agents.model_errors import RETRYABLE_KINDS
from bridge.agents.seam import EventMapper, LiveCommand
from bridge.agents.values import (
    MCP_PROMPT_ACCEPT_SECONDS,
    AskDialog,
    AskTool,
    CommandDone,
    DoFileOp,
    LiveError,
    Out,
)
from bridge.contract import ErrorInfo, McpServerStdio, ShutdownReceipt
from bridge.engines import endings
from bridge.engines.attempt import AttemptContext
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptOutcome, FirstStop
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.interrupt import Interrupt
from bridge.engines.live.live_agent import CheckoutCancelled, Lease, LiveAgent, NoLiveMode, StartFailure
from bridge.engines.live.stream import LiveStream, Reason, add_stats
from bridge.engines.output import AttemptOutput
from bridge.process.shutdown import (
    children_now,
    helpers_now,
    wait_exit,
)
from bridge.process.trace import mark

log = logging.getLogger(__name__)

EXIT_AFTER_EOF_SECONDS: Final = 3.0
STATS_TIMEOUT_SECONDS: Final = 2.0

T = TypeVar("T")


class _NotTaken(Exception):
    """The agent was gone before it accepted the prompt."""


@dataclass(frozen=True, slots=True)
class LiveHooks:
    """What the run lends a live attempt while it streams: its hooks and its policy's answers."""

    retrying: bool = False
    on_steerable: Callable[[Callable[[str], Awaitable[str | None]] | None], None] | None = None
    fallback: Callable[[], Awaitable[AttemptOutcome]] | None = None
    on_session: Callable[[str], None] | None = None
    # The run's permission check: what the agent asks before a tool while this attempt streams.
    asks: AskTool | None = None
    # Answers the agent's own dialogs (its extensions ask the user) while this attempt streams.
    dialogs: AskDialog | None = None
    # Does the file operations the agent's own tools hand over (the run's file access policy).
    file_ops: DoFileOp | None = None
    # Set once the workspace's checkpoint is taken: an agent that asks before a change waits
    # in the permission check; one that does not gets its prompt after it.
    before_tools: anyio.Event | None = None
    take_checkpoint: Callable[[], None] | None = None


class LiveAttempt:
    """One prompt of a conversation, from checkout of its live agent to the terminal message."""

    def __init__(
        self, conversations: Conversations, lease: Lease, context: AttemptContext, hooks: LiveHooks
    ) -> None:
        self.conversations = conversations
        self.lease = lease
        self.adapter = context.adapter
        self.command = context.command
        self.options = context.options
        self.limits = context.limits
        self.cancel = context.cancel
        self.extra_env = dict(context.extra_env)
        self.hooks = hooks
        self.name = self.adapter.display_name
        self.out = AttemptOutput(context, lambda: self.stop.set("internal"), self._describe)
        self._send = self.out.send
        self._on_started = context.on_started
        self.stop: FirstStop[Reason] = FirstStop()
        self.stream = LiveStream(
            self.adapter.new_mapper(self.options), lambda: conversations.starter.mode, self.out, self.stop
        )
        self.agent: LiveAgent | None = None
        self.shutdown: ShutdownReceipt | None = None
        self.interrupt = Interrupt(self.name, conversations)
        # The prompt's fate before its run streams: gone before pi read it, or refused.
        self._not_taken = False
        self._prompt_error: LiveError | None = None
        # What a bridge command did, and the session `/new` started.
        self._command_done: CommandDone | None = None
        self._new_session: str | None = None

    def _describe(self) -> str:
        pid = self.agent.pid if self.agent else None
        return f"a run of live {self.name} {pid}"

    @property
    def mapper(self) -> EventMapper:
        """The mapper of the run's stream."""
        return self.stream.mapper

    async def run(self) -> AttemptOutcome:
        """Run the attempt to its end; never raises for anything the agent does."""
        if self.cancel.cancelled:
            return self._cancelled_before_start()
        try:
            return await self._run_on_a_live_agent()
        finally:
            self.out.diffs.close()

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
            return await until_cancelled(
                self.cancel,
                self.conversations.checkout(
                    self.command,
                    self.options,
                    self.extra_env,
                    self.lease,
                    retrying=self.hooks.retrying,
                    cancel=self.cancel,
                    on_wait=self._waits_for_live_slot,
                ),
            )
        except CheckoutCancelled:
            return self._cancelled_before_start()
        except NoLiveMode as exc:
            self.conversations.starter.note_fallback(self.command, str(exc))
            if self.hooks.fallback is not None:
                return await self.hooks.fallback()
            message = f"{self.name} does not speak rpc: {exc}"
            return self._failed(ErrorInfo(kind="usage", message=message, retryable=False))
        except StartFailure as exc:
            return self._failed(exc.error)

    def _take(self, agent: LiveAgent) -> None:
        """This attempt streams on `agent` now: the run hears of its pid and session."""
        self.agent = agent
        if self._on_started is not None:
            self._on_started(agent.pid)
        if self.hooks.on_session is not None and agent.session_id:
            self.hooks.on_session(agent.session_id)
        self.stop.reset()
        self.interrupt.abort = None
        self._not_taken = self.stream.lines_seen = False
        self.stream.agent = agent

    async def _let_go(self, agent: LiveAgent, not_taken: bool) -> None:
        """The attempt is done with `agent`: no more lines or steers reach it, and it ends once
        its messages are out (with an unexpected end if the agent never concluded the turn)."""
        agent.client.listener = None
        agent.client.backlog = None
        agent.client.asks = None
        agent.client.dialogs = None
        agent.client.file_ops = None
        if self.hooks.on_steerable is not None:
            self.hooks.on_steerable(None)
        if self.mapper.last_terminal is None and not not_taken:
            self._send(self.mapper.finish_failed(endings.unexpected_end()))
        await self.out.diffs.drained()

    def _waits_for_live_slot(self) -> None:
        self._send(
            [Out("run.queued", {"position": 1, "limit": self.conversations.slots.max_live, "reason": "live"})]
        )

    async def _prompt(self, agent: LiveAgent, last_try: bool) -> AttemptOutcome:
        self.stream.begin(agent, self.adapter, self.options)
        if agent.session_file:
            mark = self.conversations.starter.mode.session_mark(agent.session_file)
            self.lease.trim = (agent.session_file, mark)
        self.interrupt.helpers = helpers_now(agent.child) if self.options.mcp_servers else {}
        if agent.client.runs_agent_as_child and agent.checkouts > 1:
            self.interrupt.adapter_before = children_now(agent.child, agent.wrappers)
        self.interrupt.mcp_argvs = tuple(
            (s.command, *s.args) for s in self.options.mcp_servers if isinstance(s, McpServerStdio)
        )
        agent.client.listener = self.stream.on_lines
        agent.client.backlog = self.out.diffs.drained
        agent.client.asks = self.hooks.asks
        agent.client.dialogs = self.hooks.dialogs
        agent.client.file_ops = self.hooks.file_ops
        prompt = await self._configure_and_send(agent, last_try)
        if isinstance(prompt, AttemptOutcome):
            return prompt
        self.stream.prompted()
        # From here on pi has the prompt (or will, as the pipe drains): a cancel is its `abort`.
        # The session message goes out once the prompt is on its way to pi, not before it:
        # the client's first message costs the prompt nothing.
        self.stream.announce_session()
        held = agent.client.take_held()
        if held:
            self.stream.map_lines(held)
        self.stream.on_tool_ended_in_cancel = lambda: self.interrupt.sweep_early(agent)
        take_back = self.cancel.on_cancel(lambda: self._cancel_now(agent))
        if self.cancel.cancelled:
            self._cancel_now(agent)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._deliver, agent, prompt, last_try)
                tasks.start_soon(self._watch_closed, agent)
                tasks.start_soon(self._watchdog, agent)
                await self.stop.event.wait()
                tasks.cancel_scope.cancel()
            if self._not_taken:
                raise _NotTaken
        finally:
            take_back()
            if self.hooks.on_steerable is not None:
                self.hooks.on_steerable(None)
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
            await until_cancelled(self.cancel, agent.configure(self.options))
        except CheckoutCancelled:
            return self._cancelled_before_prompt()
        except LiveError as exc:
            if exc.kind == "closed" and not last_try:
                raise _NotTaken from exc
            self.stream.announce_session()
            return await self._command_failed(agent, exc)
        if self.options.command is not None:
            return None  # a bridge command: `_deliver` runs it
        if self.hooks.before_tools is not None and not agent.client.asks_before_changes:
            if self.hooks.take_checkpoint is not None:
                self.hooks.take_checkpoint()
            try:
                await until_cancelled(self.cancel, self.hooks.before_tools.wait())
            except CheckoutCancelled:
                return self._cancelled_before_prompt()
        try:
            mark("engine.prompt")
            return agent.client.send_prompt_now(self.options.prompt, images=self.options.images)
        except LiveError as exc:
            if not last_try:
                raise _NotTaken from exc
            self.stream.announce_session()
            return await self._command_failed(agent, exc)

    async def _deliver(self, agent: LiveAgent, prompt: LiveCommand | None, last_try: bool) -> None:
        """The prompt read and accepted by pi; then it can be steered. A refusal, a pi that does
        not read it or one that is gone ends the attempt."""
        if prompt is None:
            await self._run_command(agent)
            return
        try:
            if self.options.mcp_servers:
                accepted = await agent.client.delivered(prompt, MCP_PROMPT_ACCEPT_SECONDS)
            else:
                accepted = await agent.client.delivered(prompt)
        except LiveError as exc:
            if exc.kind == "closed" and not last_try and not self.stream.lines_seen:
                self._not_taken = True
                self.stop.set("closed")
                return
            self._prompt_error = exc
            self.stop.set("refused")
            return
        if accepted.get("disposition") == "handled":
            # An extension's command consumed the prompt: no run starts, no agent_settled follows.
            self.stop.set("settled")
            return
        if self.hooks.on_steerable is not None and self.stop.reason is None:
            self.hooks.on_steerable(self.steer)

    async def _run_command(self, agent: LiveAgent) -> None:
        """A bridge command instead of a prompt: the agent's own command, whose answer is the
        run's text; `/new` moves the conversation's agent to the session it started."""
        command = self.options.command
        assert command is not None
        try:
            done = await agent.client.run_command(command)
        except LiveError as exc:
            self._prompt_error = exc
            self.stop.set("refused")
            return
        self._command_done = done
        if done.state is not None:
            self.conversations.slots.rebind(agent, done.state)
            if agent.session_id is not None:
                self._new_session = agent.session_id
                self._send([Out("session.started", {"sessionId": agent.session_id, "cwd": agent.cwd})])
                if self.hooks.on_session is not None:
                    self.hooks.on_session(agent.session_id)
        self.stop.set("settled")

    async def steer(self, text: str) -> str | None:
        """Hand pi a steering message; None when it took it, else why not."""
        agent = self.agent
        if agent is None or self.stop.reason is not None:
            return "the run is not streaming"
        return await self.interrupt.steer(agent, text)

    def _cancel_now(self, agent: LiveAgent) -> None:
        """The cancel's first stage, in the call that set the token (no task to wake first): pi's
        `abort` is written, and the attempt's end is recorded as a cancel before anything else
        can settle it (pi's own fast settle, a scan for the receipt)."""
        if self.stop.reason is not None:
            return
        self.interrupt.first_stage(agent)
        self.stop.set("cancel")

    async def _watch_closed(self, agent: LiveAgent) -> None:
        async with anyio.create_task_group() as tasks:

            async def exited() -> None:
                await agent.child.process.wait()
                # Let pi's last lines arrive before concluding.
                with anyio.move_on_after(0.5):
                    await agent.client.closed.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(exited)
            await agent.client.closed.wait()
            tasks.cancel_scope.cancel()
        self.stop.set("closed")

    async def _watchdog(self, agent: LiveAgent) -> None:
        client = agent.client
        # the bridge not reading pi (the client behind, a diff's read): that quiet is not pi's
        reason = await endings.overrun(
            self.limits,
            lambda: client.holding_back,
            lambda: max(self.stream.last_output, client.reading_since),
        )
        if reason is not None:
            self.stop.set(reason)

    # ------------------------------------------------------------------ concluding

    async def _conclude(self, agent: LiveAgent) -> None:
        reason = self.stop.reason
        if reason == "settled":
            await self.out.diffs.drained()  # a diff that fails to compute fails the run, not completes it
            if self.out.fault is not None:
                reason = "internal"
        if reason == "settled":
            outs = self.stream.with_command_text(
                self.mapper.feed(agent.client.run_end_line), self._command_done
            )
            await add_stats(agent, outs)
            self._send(outs)
            await self.interrupt.sweep(agent)
            return
        if reason == "cancel":
            self.shutdown = await self.interrupt.stop_run(agent)
            self._send(self.mapper.finish_cancelled(self.shutdown))
            return
        if reason == "internal":
            # pi itself is fine: its run is stopped as a cancel stops it, and it stays if it settles.
            self.shutdown = await self.interrupt.stop_run(agent)
            assert self.out.fault is not None
            self._send(self.mapper.finish_failed(self.out.fault))
            return
        if reason == "closed":
            await self._died(agent)
            return
        if reason == "refused":
            assert self._prompt_error is not None
            await self._prompt_failed(agent, self._prompt_error)
            return
        receipt = await self.interrupt.kill(agent)
        self.shutdown = receipt
        if reason == "deadline":
            self._send(self.mapper.finish_failed(endings.deadline_error(self.limits)))
        else:
            error = endings.silence_error(self.name, self.limits, agent.client.stderr.text())
            self._send(self.mapper.finish_failed(error))

    async def _died(self, agent: LiveAgent) -> None:
        exited = await wait_exit(agent.child, EXIT_AFTER_EOF_SECONDS)
        stderr = agent.client.stderr.text()
        if not exited:
            self.shutdown = await self.interrupt.kill(agent)
            self._send(self.mapper.finish_failed(endings.kept_running_error(self.name, stderr)))
            return
        await self.conversations.invalidate(agent)
        code, signal_name = endings.exit_status(agent.child.returncode)
        outs = self.mapper.finish_exited(code, signal_name, stderr)
        self._send(outs)

    async def _command_failed(self, agent: LiveAgent, exc: LiveError) -> AttemptOutcome:
        """A command before the prompt's run (configure, the prompt itself) failed."""
        if exc.kind == "closed":
            self.stop.reason = "closed"
        await self._prompt_failed(agent, exc)
        return self._outcome()

    async def _prompt_failed(self, agent: LiveAgent, exc: LiveError) -> None:
        if exc.kind == "closed":
            await self._died(agent)
            return
        if exc.kind == "timeout":
            self.shutdown = await self.interrupt.kill(agent)
        error = refusal_error(exc, self.name, agent.client.stderr.text(), self.options.command is not None)
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
        self.stream.announce_session()
        self._send(self.mapper.finish_cancelled(receipt))
        return self._outcome()

    def _outcome(self) -> AttemptOutcome:
        agent = self.agent
        kept = agent is not None and agent.stopped is None and agent.alive
        outcome = endings.outcome_of(
            self.mapper, self.shutdown, agent.pid if agent else None, agent_kept=kept
        )
        if self.interrupt.unsent and outcome.status == "cancelled":
            outcome = dataclasses.replace(outcome, unsent=tuple(self.interrupt.unsent))
        if self._new_session is not None:
            outcome = dataclasses.replace(outcome, session_id=self._new_session)
        return outcome


def refusal_error(exc: LiveError, name: str, stderr: str, bridge_command: bool) -> ErrorInfo:
    """The run's error when a command before its run (configure, the prompt) was refused or
    timed out (an agent that timed out was stopped)."""
    if exc.kind == "timeout":
        return ErrorInfo(
            kind="stalled", message=f"{exc}; {name} was stopped", retryable=True, stderr=stderr or None
        )
    if exc.kind == "refused" and exc.error_kind is not None:
        # the agent's words say what is wrong (no key: `auth`); the same again would not help
        # unless the kind is one worth retrying
        return ErrorInfo(kind=exc.error_kind, message=str(exc), retryable=exc.error_kind in RETRYABLE_KINDS)
    if bridge_command and exc.kind == "refused":
        # the agent cannot do the command now ("nothing to compact"): the same again would not
        return ErrorInfo(kind="usage", message=str(exc), retryable=False)
    model_refused = exc.command == "set_model"
    return ErrorInfo(
        kind="model_not_found" if model_refused else "busy", message=str(exc), retryable=not model_refused
    )


async def until_cancelled(cancel: CancelToken, work: Awaitable[T]) -> T:
    """`work`, unless the run's cancel comes first (then CheckoutCancelled): the steps
    before the prompt is written stop at once, and the prompt is never sent."""
    with anyio.CancelScope() as scope:
        take_back = cancel.on_cancel(scope.cancel)
        if cancel.cancelled:
            scope.cancel()
        try:
            return await work
        finally:
            take_back()
    raise CheckoutCancelled
