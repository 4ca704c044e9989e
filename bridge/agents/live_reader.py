"""The reading half of a live agent's client: stdout in line batches to a listener, stderr's tail."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc

from bridge.agents.seam import LiveCommand
from bridge.agents.values import AskDialog, AskTool, DoFileOp, ToolCheck, ToolVerdict
from bridge.process.framing import MAX_LINE_BYTES, LineFramer, TailBuffer
from bridge.process.spawn import ChildProcess
from bridge.process.stdin_pipe import StdinClosed

log = logging.getLogger(__name__)

READ_CHUNK: Final = 256 * 1024
# The client is asked whether it keeps up once per this much of the agent's output, not per read:
# the ask is cheap while it does, but the wait around it (cut short by a command) is not.
CLIENT_CHECK_BYTES: Final = 64 * 1024
# While a command waits for its answer, the agent is read this far past a client that is behind:
# the answer comes after what the agent prints first, and this bounds what the bridge then holds.
READ_AHEAD_FOR_ANSWERS: Final = 4 * 1024 * 1024

Lines = Callable[[list[bytes]], None]


class PendingCommand:
    """A command written to a live agent, and (once it came) the agent's answer to it."""

    def __init__(self, name: str, command_id: str) -> None:
        self.name = name
        self.command_id = command_id
        self.answered = anyio.Event()
        self.response: dict[str, Any] | None = None


def own_command(command: LiveCommand) -> PendingCommand:
    """A command this client wrote (the engine hands back what it was given)."""
    assert isinstance(command, PendingCommand), command
    return command


#: How many lines told while no attempt listened are kept for the next one (the newest).
HELD_LINES: Final = 16


class LiveReader:
    """Reads one live agent process; a subclass says what each batch of lines is (`_dispatch`)."""

    #: See `LiveClient.runs_agent_as_child`.
    runs_agent_as_child: bool = False

    def __init__(
        self,
        child: ChildProcess,
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.child = child
        self.stderr = TailBuffer()
        self.closed = anyio.Event()
        self.listener: Lines | None = None
        # What the agent told the user while no attempt listened (pi's start-up notifies, such as
        # an MCP server that failed to connect): the next attempt streams them first.
        self.held: deque[bytes] = deque(maxlen=HELD_LINES)
        # Awaited, like the client's backpressure, before each read while a listener is set:
        # what the listener holds back (messages waiting for a diff's read) bounds what is read.
        self.backlog: Callable[[], Awaitable[None]] | None = None
        # While the bridge does not read the agent (the client is behind, or the listener holds
        # back), the agent blocks on its pipe: that quiet is the bridge's, not the agent's silence.
        self._holding = False
        self.reading_since = 0.0
        self.framer = LineFramer(max_line_bytes)
        self.lines_read = 0  # every stdout line, answers included: zero means the agent never spoke
        self._wait_writable = wait_writable
        # The wait for a client that is behind, while it waits: a command cuts it short.
        self._client_wait: anyio.CancelScope | None = None
        self._unchecked = 0  # bytes read since the client was last asked whether it keeps up
        self._ahead_for_answers = 0  # bytes read past a slow client while commands wait for answers
        self._tasks: anyio.abc.TaskGroup | None = None
        # The agent's questions not answered yet (an id answered once, never twice).
        self._open_checks: set[str] = set()
        self._deciding = 0
        # Decides the tool calls the agent asks about; set per attempt by the engine.
        self.asks: AskTool | None = None
        # Answers the agent's own dialogs; set per attempt by the engine (None: cancelled).
        self.dialogs: AskDialog | None = None
        # Does the file operations the agent's tools hand over; set per attempt (None: refused).
        self.file_ops: DoFileOp | None = None
        self._next_id = 0
        # Commands written whose answer is awaited, by id; the interrupt on its way is answered
        # when the turn ended rather than by id.
        self._waiting: dict[str, PendingCommand] = {}
        self._interrupting: PendingCommand | None = None

    @property
    def holding_back(self) -> bool:
        """Whether the agent waits on the bridge: its output not read, or a question not decided."""
        return self._holding or self._deciding > 0

    async def _decide(
        self, request_id: str, check: ToolCheck, asks: AskTool, answer: Callable[[ToolVerdict], bytes]
    ) -> None:
        """Have the run's permission check decide a tool call, then answer the agent once."""
        self._deciding += 1
        try:
            verdict = await asks(check)
        except Exception:
            log.exception("the permission check of tool call %s failed", check.tool_call_id)
            verdict = ToolVerdict(allow=False, reason="denied: the bridge could not decide")
        finally:
            self._deciding -= 1
            self.reading_since = time.monotonic()  # the time asking the user is not the agent's silence
        self._settle(request_id, answer(verdict))

    def take_held(self) -> list[bytes]:
        """The lines held while no attempt listened, once (see `held`)."""
        lines = list(self.held)
        self.held.clear()
        return lines

    def _settle(self, request_id: str, line: bytes) -> None:
        """Answer an open question (a late second answer is dropped)."""
        if request_id in self._open_checks:
            self._open_checks.discard(request_id)
            self._write_quietly(line)

    def _write_quietly(self, line: bytes) -> None:
        with contextlib.suppress(StdinClosed, OSError):
            self.child.stdin.write_now(line)

    def _awaiting_answers(self) -> bool:
        """Whether a command written to the agent waits for its answer."""
        return False

    def _on_closed(self) -> None:
        """The agent closed its output: wake whatever waits for an answer."""

    def _dispatch(self, lines: list[bytes]) -> None:
        raise NotImplementedError

    def _cut_client_wait(self) -> None:
        """A command was written: its answer must be read, whether the client keeps up or not."""
        if self._client_wait is not None:
            self._client_wait.cancel()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read the agent's stdout and stderr until its stdout closes."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._pump_stderr)
            task_status.started()
            try:
                await self._pump_stdout()
            finally:
                self.closed.set()
                self._on_closed()
                tasks.cancel_scope.cancel()

    async def _pump_stderr(self) -> None:
        stream = self.child.process.stderr
        if stream is None:
            return
        try:
            async for chunk in stream:
                self.stderr.write(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def _pump_stdout(self) -> None:
        stream = self.child.process.stdout
        if stream is None:
            return
        framer = self.framer
        while True:
            if self.listener is not None and (
                self.backlog is not None or self._unchecked >= CLIENT_CHECK_BYTES
            ):
                await self._hold_back()
            try:
                chunk = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                break
            self._unchecked += len(chunk)
            self._dispatch(framer.feed(chunk))
        last = framer.finish()
        if last:
            self._dispatch([last])

    async def _hold_back(self) -> None:
        """Wait while the listener holds messages back (a diff's read), and, once enough was read
        since it was last asked, while the client is behind: the agent's output then waits in its
        pipe and the agent blocks on it. While a command waits for its answer, up to
        READ_AHEAD_FOR_ANSWERS more is read first (the answer comes after what the agent prints
        before it); a command sent during the wait ends it."""
        self._holding = True
        try:
            if self._unchecked >= CLIENT_CHECK_BYTES:
                waiting = self._awaiting_answers()
                self._ahead_for_answers = self._ahead_for_answers + self._unchecked if waiting else 0
                self._unchecked = 0
                for_answer = waiting and self._ahead_for_answers < READ_AHEAD_FOR_ANSWERS
                if self._wait_writable is not None and not for_answer:
                    with anyio.CancelScope() as scope:
                        self._client_wait = scope
                        try:
                            await self._wait_writable()
                        finally:
                            self._client_wait = None
            backlog = self.backlog
            if backlog is not None:
                await backlog()
        finally:
            self._holding = False
            self.reading_since = time.monotonic()
