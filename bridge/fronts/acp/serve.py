"""`pi-bridge acp`'s process: stdio frames, start-up order and shutdown.

Start-up is ordered for the client's first prompt: the run registry starts and pre-spawns pi
first, then the ACP SDK (bridge/fronts/acp/agent.py, most of a second of imports) loads in a worker
thread while pi boots, and a plain `initialize` has been answered before either
(bridge/fronts/acp/first_frame.py). Written here, where the SDK falls short:
- `StdioTransport`: the SDK's stdio transport drops a non-JSON line with a log line; ACP clients
  get a JSON-RPC parse error (-32700) or invalid request (-32600) instead, and stdout carries
  nothing but frames;
- lifecycle: end of input and SIGTERM/SIGINT/SIGHUP stop every run (three-stage) before exit.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import orjson
from pydantic import BaseModel

from bridge import contract
from bridge.agents.seam import AgentAdapter
from bridge.fronts import surrogates
from bridge.fronts.acp.first_frame import FirstFrame
from bridge.process.spawn import become_subreaper, reap_orphans
from bridge.runs.registry import BridgeConfig, RunRegistry

if TYPE_CHECKING:
    from bridge.fronts.acp.agent import PiAcpAgent

log = logging.getLogger(__name__)

MAX_LINE_BYTES: Final = 50 * 1024 * 1024
# Past this many bytes waiting in stdout's buffer, frames wait their turn (`send` drains).
WRITE_HIGH_WATER: Final = 1024 * 1024
SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _error_frame(code: int, message: str, msg_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control of stdout, for StreamWriter.drain; `on_resumed` hears each time stdout's
    buffer has drained after a pause."""

    def __init__(self) -> None:
        self._resumed: asyncio.Future[None] | None = None
        self.on_resumed: Callable[[], None] | None = None

    def pause_writing(self) -> None:
        self._resumed = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)
        self._resumed = None
        if self.on_resumed is not None:
            self.on_resumed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.resume_writing()

    async def _drain_helper(self) -> None:
        if self._resumed is not None:
            await self._resumed


class _FileWriter:
    """stdout redirected to a file (no pipe transport for it): written through at once."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        return None


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


class StdioTransport:
    """Newline-delimited JSON-RPC on stdin/stdout that answers malformed frames itself."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter | _FileWriter,
        flow: _WriteProtocol | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._flow = flow
        self.closed = False
        # Sees each valid message as it is read, before the SDK would dispatch it (a task
        # later); True: it served the message itself, and the SDK never sees it.
        self.direct: Callable[[dict[str, Any]], bool] | None = None

    @classmethod
    async def open(cls, first: FirstFrame) -> StdioTransport:
        """stdin and stdout, once the first-frame thread is done with them; what it read and did
        not answer is read first."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def resolve() -> None:
            if not done.done():
                done.set_result(None)

        def finished() -> None:
            try:
                loop.call_soon_threadsafe(resolve)
            except RuntimeError:  # the loop closed first (the bridge is exiting)
                pass

        first.when_done(finished)
        await done
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        reader.feed_data(first.rest)
        if first.eof:
            reader.feed_eof()
        elif stat.S_ISREG(os.fstat(0).st_mode):  # a file, not a pipe: it is all there to read
            reader.feed_data(_read_all(0))
            reader.feed_eof()
        else:
            stdin = open(0, "rb", buffering=0, closefd=False)  # noqa: SIM115 (the loop owns it)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        if stat.S_ISREG(os.fstat(1).st_mode):  # frames written to a file: plain blocking writes
            return cls(reader, _FileWriter(1))
        stdout = open(1, "wb", buffering=0, closefd=False)  # noqa: SIM115 (the loop owns it)
        protocol = _WriteProtocol()
        transport, _ = await loop.connect_write_pipe(lambda: protocol, stdout)
        return cls(reader, asyncio.StreamWriter(transport, protocol, None, loop), protocol)

    @property
    def buffered_bytes(self) -> int:
        """Bytes written but still waiting for the client to read them."""
        writer = self._writer
        return writer.transport.get_write_buffer_size() if isinstance(writer, asyncio.StreamWriter) else 0

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Call `callback` each time stdout's buffer has drained after the client fell behind."""
        if self._flow is not None:
            self._flow.on_resumed = callback

    def send_now(self, *messages: dict[str, Any]) -> bool:
        """Write these frames at once, in one write, if stdout keeps up; False: none was written
        (use `send`)."""
        return self._keeps_up() and self._write(
            b"".join(orjson.dumps(message) + b"\n" for message in messages)
        )

    def write_now(self, lines: bytes) -> bool:
        """`send_now` of frames serialized already (newline-terminated)."""
        return self._keeps_up() and self._write(lines)

    def _keeps_up(self) -> bool:
        writer = self._writer
        if self.closed:
            return False
        return not (
            isinstance(writer, asyncio.StreamWriter)
            and (writer.transport.is_closing() or writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER)
        )

    def _write(self, lines: bytes) -> bool:
        try:
            self._writer.write(lines)
        except (ConnectionError, OSError, RuntimeError):
            return False
        return True

    async def send(self, message: dict[str, Any]) -> None:
        await self.write(orjson.dumps(message) + b"\n")

    async def write(self, lines: bytes) -> None:
        """Write frames serialized already, then wait while stdout's buffer is full."""
        if self.closed:
            raise ConnectionError("stdout is closed")
        self._writer.write(lines)
        await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                self._refuse(line, exc)
                continue
            problem = _frame_problem(message)
            if problem is None:
                if self.direct is not None and self.direct(message):
                    continue
                return message  # type: ignore[no-any-return]
            msg_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
                msg_id = None
            self._answer(_error_frame(-32600, f"invalid request: {problem}", msg_id))

    async def _read_line(self) -> bytes | None:
        chunks: list[bytes] = []
        while True:
            try:
                chunks.append(await self._reader.readuntil(b"\n"))
                return b"".join(chunks)
            except asyncio.LimitOverrunError as exc:
                chunks.append(await self._reader.readexactly(exc.consumed))
            except asyncio.IncompleteReadError as exc:
                chunks.append(exc.partial)
                data = b"".join(chunks)
                return data or None

    def _refuse(self, line: bytes, exc: orjson.JSONDecodeError) -> None:
        """A line orjson refused: JSON that holds a lone surrogate gets the answer
        bridge/fronts/surrogates.py names; anything else is not JSON to the bridge (NaN, Infinity, an
        integer beyond 64 bits: no ACP message carries one)."""
        try:
            refused = surrogates.refusal(json.loads(line))
        except (ValueError, RecursionError):
            refused = None
        if refused is None:
            self._answer(_error_frame(-32700, f"parse error: not JSON ({exc})"))
        elif not refused.answer:
            log.warning("a notification or response refused: %s", refused.message)
        else:
            frame = _error_frame(refused.code, refused.message, refused.msg_id)
            if refused.code == surrogates.INVALID_PARAMS:
                frame["error"]["data"] = {"errors": [{"field": refused.field, "message": surrogates.PROBLEM}]}
            self._answer(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        # Never waits for the client to read: a session/cancel behind a bad frame must still
        # be read at once. (What a client's bad frames cost is the client's to read.)
        if not self.closed:
            self._write(orjson.dumps(frame) + b"\n")

    async def close(self) -> None:
        self.closed = True


def _frame_problem(message: Any) -> str | None:
    """Why a parsed frame is not a JSON-RPC 2.0 request, notification or response (None: it is)."""
    if not isinstance(message, dict):
        return f"a frame must be a JSON object, not {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'the frame must have "jsonrpc": "2.0"'
    msg_id = message.get("id")
    if "id" in message and (isinstance(msg_id, bool) or not isinstance(msg_id, (str, int, type(None)))):
        return "id must be a string, a number or null"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "method must be a non-empty string"
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return "params must be an object or an array"
        return None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return "the frame is neither a request, a notification nor a response"


class _LateSink:
    """The registry's sink and backpressure hook, bound to the ACP agent once the SDK has loaded
    (no run starts before: runs start from prompts, which the agent serves)."""

    def __init__(self) -> None:
        self.agent: PiAcpAgent | None = None

    def __call__(self, payloads: list[dict[str, Any]]) -> None:
        if self.agent is not None:
            self.agent.on_messages(payloads)

    async def wait_writable(self) -> None:
        """Wait while the client is behind (see PiAcpAgent.wait_writable)."""
        if self.agent is not None:
            await self.agent.wait_writable()


def _load_front(registry: RunRegistry) -> Any:
    """The SDK and the ACP agent (worker thread: the event loop keeps serving pi meanwhile).

    What the first prompt would otherwise do is done here too, while pi boots: the wire
    contract's validators are built (its models defer that to first use, some ms on the first
    prompt's path), and every agent's adapter (a session's first prompt asks each agent whether
    the session is its own, and building one imports its package)."""
    front = importlib.import_module("bridge.fronts.acp.agent")
    for model in vars(contract).values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == contract.__name__:
            model.model_rebuild()
    for name in registry.agent_names():
        try:
            registry.adapter_named(name)
        except Exception as exc:  # an agent that cannot be built is the prompt's to report
            log.info("agent %s not built ahead: %s", name, exc)
    return front


async def serve_acp(first: FirstFrame, adapter: AgentAdapter, config: BridgeConfig, default_cwd: str) -> int:
    """Serve ACP on this process's stdin/stdout until end of input or a signal; stop runs first."""
    loop = asyncio.get_running_loop()
    sys.stdout = sys.stderr  # stdout belongs to the protocol: a stray print must not corrupt it
    stop = asyncio.Event()
    for signum in SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    subreaper = become_subreaper()
    log.info("pi-bridge acp serving on stdio (pid %d, subreaper=%s)", os.getpid(), subreaper)
    sink = _LateSink()
    registry = RunRegistry(adapter, config, sink, wait_writable=sink.wait_writable)
    agents: list[PiAcpAgent] = []
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(registry.serve)
            registry.prime_live(default_cwd)  # pi boots while the SDK loads
            tasks.start_soon(_reap_periodically)

            async def serve_front() -> None:
                front = await asyncio.to_thread(_load_front, registry)
                transport = await StdioTransport.open(first)
                agent = front.PiAcpAgent(registry, default_cwd=default_cwd)
                sink.agent = agent
                agents.append(agent)
                tasks.start_soon(agent.pump)
                await front.connect(agent, transport).main_loop()
                stop.set()

            tasks.start_soon(serve_front)
            await stop.wait()
            registry.close()
            with anyio.CancelScope(shield=True):
                await registry.stop_all("the ACP connection ended")
                for agent in agents:
                    with anyio.move_on_after(2.0):
                        await agent.flush()
                    await agent.close()
            tasks.cancel_scope.cancel()
    finally:
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)
        reap_orphans()
    return 0


async def _reap_periodically() -> None:
    """Adopted orphans (we are a subreaper) must be reaped or they linger as zombies."""
    while True:
        await anyio.sleep(1.0)
        reap_orphans()


def run_acp(first: FirstFrame, adapter: AgentAdapter, config: BridgeConfig) -> int:
    """Serve ACP on stdio; returns the exit code."""
    return asyncio.run(serve_acp(first, adapter, config, os.getcwd()))
