"""The one-process engine: one attempt starts the agent once, streams its mapped messages and
stops it however the attempt ends, with exactly one terminal message (no retry: runs/ retries)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final, Literal

import anyio

from bridge.agents.seam import EventMapper
from bridge.agents.values import Out
from bridge.contract import ErrorInfo, ShutdownReceipt
from bridge.engines.attempt import AttemptContext
from bridge.engines.endings import (
    AttemptOutcome,
    FirstStop,
    deadline_error,
    exit_status,
    kept_running_error,
    not_started,
    outcome_of,
    overrun,
    silence_error,
    unexpected_end,
)
from bridge.engines.output import AttemptOutput
from bridge.engines.warm_pool import WarmPool
from bridge.process.framing import LineFramer, TailBuffer
from bridge.process.shutdown import shutdown_tree, sweep_leftovers, wait_exit
from bridge.process.spawn import ChildProcess, SpawnError, forget, spawn
from bridge.process.stdin_pipe import StdinClosed

log = logging.getLogger(__name__)

READ_CHUNK: Final = 256 * 1024
# pi exits shortly after its last event; past this, a process whose stdout closed is stuck.
EXIT_AFTER_EOF_SECONDS: Final = 3.0
# After the agent itself exited: how long its stdout may stay open (a helper holding the pipe)
# before what is left of its tree is stopped.
DRAIN_AFTER_EXIT_SECONDS: Final = 1.0
DRAIN_AFTER_STOP_SECONDS: Final = 0.5

StopReason = Literal["eof", "agent", "cancel", "deadline", "silence", "internal"]


class ProcessAttempt:
    """One run of the agent process, from spawn to its terminal message."""

    def __init__(
        self,
        context: AttemptContext,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        pool: WarmPool | None = None,
    ) -> None:
        self.adapter = context.adapter
        self.command = context.command
        self.options = context.options
        self.limits = context.limits
        self.cancel = context.cancel
        self.mapper: EventMapper = self.adapter.new_mapper(self.options)
        self.name = self.adapter.display_name
        self.out = AttemptOutput(
            context, lambda: self._stop.set("internal"), lambda: f"an attempt of {self.adapter.name}"
        )
        self._send = self.out.send
        self._wait_writable = wait_writable
        self._extra_env = dict(context.extra_env)
        self._pool = pool
        self._on_started = context.on_started
        self._stop: FirstStop[StopReason] = FirstStop()
        self._stderr = TailBuffer()
        self._framer = LineFramer(self.limits.max_line_bytes)
        self._last_output = time.monotonic()
        # While the bridge waits for the client to take its output (or for a diff's read that
        # holds messages back) it reads nothing, so the agent blocks on its pipe: that quiet is
        # the bridge's, never the agent's silence.
        self._holding_back = False
        self._stdout_done = anyio.Event()
        self.child: ChildProcess | None = None
        self.shutdown: ShutdownReceipt | None = None

    async def run(self) -> AttemptOutcome:
        """Run the attempt to its end; never raises for anything the agent does."""
        if self.cancel.cancelled:
            return self._finish_cancelled_before_start()
        if self.options.images:
            # One process per prompt takes its prompt as text: the images would be lost unseen.
            error = ErrorInfo(
                kind="usage",
                message=f"{self.name} takes images only in a live conversation (rpc mode); "
                "this run would start one process per prompt, which cannot pass them",
                retryable=False,
            )
            self._send(self.mapper.finish_failed(error))
            return self._outcome()
        spec = self.adapter.launch_spec(self.command, self.options)
        if self._pool is not None:
            self._pool.yield_to_run()
            self.child = self._pool.take(spec, self._extra_env)
            self._pool.forget_session(self.options.session_id)
        if self.child is None:
            try:
                self.child = await spawn(spec.argv, spec.cwd, {**self._extra_env, **spec.env})
            except (SpawnError, ValueError) as exc:  # ValueError: a NUL byte in argv, cwd or env
                self._send(self.mapper.finish_failed(self.adapter.spawn_failure(self.command, str(exc))))
                return self._outcome()
        child = self.child
        if self._on_started is not None:
            self._on_started(child.pid)
        if self.cancel.cancelled:
            return await self._finish_cancelled_at_start(child)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._feed_stdin, child, spec.stdin)
                tasks.start_soon(self._pump_stderr, child)
                tasks.start_soon(self._pump_stdout, child)
                tasks.start_soon(self._watch_cancel)
                tasks.start_soon(self._watchdog)
                tasks.start_soon(self._watch_exit, child)
                await self._stop.event.wait()
                with anyio.CancelScope(shield=True):
                    await self._conclude(child)
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if child.returncode is None:
                    self.shutdown = await shutdown_tree(child, self.adapter.interrupt_signal)
                self._send(self.mapper.finish_failed(unexpected_end()))
                forget(child)
                await self.out.diffs.drained()  # the attempt ends once its messages are out
                self.out.diffs.close()
        return self._outcome()

    # ------------------------------------------------------------------ concluding

    async def _conclude(self, child: ChildProcess) -> None:
        """Stop what must be stopped for the reason the attempt ended; send its terminal message."""
        reason = self._stop.reason
        if reason == "eof":
            exited = await self._exit_unless_cancelled(child, EXIT_AFTER_EOF_SECONDS)
            if exited is None:
                self.shutdown = await shutdown_tree(child, self.adapter.interrupt_signal)
                self._send(self.mapper.finish_cancelled(self.shutdown))
                return
            if not exited:
                self.shutdown = await shutdown_tree(child, self.adapter.interrupt_signal)
                self._send(self.mapper.finish_failed(kept_running_error(self.name, self._stderr.text())))
                return
            await sweep_leftovers(child)
            self._finish_exited(child)
            return
        # Every other reason stops the process tree first, then delivers what it had written.
        self.shutdown = await shutdown_tree(child, self.adapter.interrupt_signal)
        await self._drain_stdout()
        if reason == "cancel":
            self._send(self.mapper.finish_cancelled(self.shutdown))
        elif reason == "internal":
            assert self.out.fault is not None
            self._send(self.mapper.finish_failed(self.out.fault))
        elif reason == "deadline":
            self._send(self.mapper.finish_failed(deadline_error(self.limits)))
        elif reason == "silence":
            self._send(self.mapper.finish_failed(silence_error(self.name, self.limits, self._stderr.text())))
        else:  # "agent": the mapper already sent the terminal (e.g. the agent started its own retry)
            self._finish_exited(child)

    async def _exit_unless_cancelled(self, child: ChildProcess, timeout: float) -> bool | None:
        """Wait for the agent to exit: True if it did, False on timeout, None if cancelled first."""
        ended: list[bool | None] = []
        async with anyio.create_task_group() as tasks:

            async def exit_of_agent() -> None:
                ended.append(await wait_exit(child, timeout))
                tasks.cancel_scope.cancel()

            async def cancel_of_run() -> None:
                await self.cancel.wait()
                ended.append(None)
                tasks.cancel_scope.cancel()

            tasks.start_soon(exit_of_agent)
            tasks.start_soon(cancel_of_run)
        return ended[0]

    async def _finish_cancelled_at_start(self, child: ChildProcess) -> AttemptOutcome:
        """The cancel came while the agent was starting: stop it before it ever gets the prompt."""
        try:
            self.shutdown = await shutdown_tree(child, self.adapter.interrupt_signal)
        finally:
            forget(child)
        self._send(self.mapper.finish_cancelled(self.shutdown))
        return self._outcome()

    def _finish_exited(self, child: ChildProcess) -> None:
        code, signal_name = exit_status(child.returncode)
        self._send(self.mapper.finish_exited(code, signal_name, self._stderr.text()))

    def _finish_cancelled_before_start(self) -> AttemptOutcome:
        self.shutdown = not_started()
        self._send(self.mapper.finish_cancelled(self.shutdown))
        return self._outcome()

    async def _drain_stdout(self) -> None:
        """After a stop: deliver what the agent had already written before it died."""
        with anyio.move_on_after(DRAIN_AFTER_STOP_SECONDS):
            await self._stdout_done.wait()

    # ------------------------------------------------------------------ tasks

    async def _feed_stdin(self, child: ChildProcess, data: bytes) -> None:
        stdin = child.stdin
        try:
            if data:
                stdin.write_now(data)
                await stdin.drain()
        except (StdinClosed, OSError) as exc:
            log.info("%s did not take its whole stdin: %s", self.name, exc)
        finally:
            stdin.close()  # EOF once the prompt is out: pi's json mode reads it to the end

    async def _pump_stderr(self, child: ChildProcess) -> None:
        stream = child.process.stderr
        if stream is None:
            return
        try:
            async for chunk in stream:
                self._stderr.write(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def _pump_stdout(self, child: ChildProcess) -> None:
        stream = child.process.stdout
        if stream is None:
            self._stop.set("eof")
            return
        framer = self._framer
        try:
            while True:
                if self._wait_writable is not None or self.out.diffs.holding:
                    await self._hold_back()
                try:
                    chunk = await stream.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                self._last_output = time.monotonic()
                self._take_lines(framer.feed(chunk))
                if self.mapper.wants_stop:
                    self._stop.set("agent")
            last = framer.finish()
            self._take_lines([last] if last else [])
        finally:
            self._stdout_done.set()
            self._stop.set("eof")

    def _take_lines(self, lines: list[bytes]) -> None:
        """Map the agent's lines and send the messages; a bug here fails this attempt, and what
        was mapped before it still goes out. After one, lines are read and dropped."""
        if self.out.fault is not None:
            self._framer.oversized.clear()
            self._framer.oversized_heads.clear()
            return
        mapper = self.mapper
        outs: list[Out] = []
        try:
            for line in lines:
                if line:
                    self.out.diffs.note_line(line)
                    outs.extend(mapper.feed(line))
            self._flush_oversized()
        except Exception as exc:
            self.out.fail_inside(exc)
        try:
            self._send(outs)
        except Exception as exc:
            self.out.fail_inside(exc)

    async def _hold_back(self) -> None:
        """Wait until the client takes more output and no message waits for a diff's read; the
        silence clock restarts afterwards."""
        self._holding_back = True
        try:
            if self._wait_writable is not None:
                await self._wait_writable()
            await self.out.diffs.drained()
        finally:
            self._holding_back = False
            self._last_output = max(self._last_output, time.monotonic())

    def _flush_oversized(self) -> None:
        if self._framer.oversized:
            for description, head in zip(self._framer.oversized, self._framer.oversized_heads, strict=True):
                self._send(self.mapper.feed_oversized(description, head))
            self._framer.oversized.clear()
            self._framer.oversized_heads.clear()

    async def _watch_exit(self, child: ChildProcess) -> None:
        """The agent's own exit ends the attempt, even while a helper it left keeps stdout open.

        The helper is stopped, so the pipe closes and the reader delivers the rest at the
        client's pace (a slow editor loses nothing). Only if something outside the run's
        containment still holds the pipe does the attempt end without that end of stream.
        """
        await wait_exit(child, math.inf)
        with anyio.move_on_after(DRAIN_AFTER_EXIT_SECONDS):
            await self._stdout_done.wait()
        if self._stdout_done.is_set():
            return
        await sweep_leftovers(child)
        with anyio.move_on_after(EXIT_AFTER_EOF_SECONDS):
            await self._stdout_done.wait()
        self._stop.set("eof")

    async def _watch_cancel(self) -> None:
        await self.cancel.wait()
        self._stop.set("cancel")

    async def _watchdog(self) -> None:
        """Stop the attempt at its deadline, or when the agent stays silent too long."""
        reason = await overrun(self.limits, lambda: self._holding_back, lambda: self._last_output)
        if reason is not None:
            self._stop.set(reason)

    # ------------------------------------------------------------------ outcome

    def _outcome(self) -> AttemptOutcome:
        return outcome_of(self.mapper, self.shutdown, self.child.pid if self.child else None)
