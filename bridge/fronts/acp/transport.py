"""The ACP front's stdio transport: newline-delimited JSON-RPC that answers malformed frames itself.

Written here because the SDK's stdio transport falls short: it drops a non-JSON line with a log
line, where ACP clients get a JSON-RPC parse error (-32700) or invalid request (-32600), and
stdout carries nothing but frames. Writes go out at once while stdout keeps up (`send_now`), and
wait their turn past a high-water mark (`send`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from collections.abc import Callable
from typing import Any, Final

import orjson

from bridge.fronts import surrogates
from bridge.fronts.acp.first_frame import FirstFrame
from bridge.policy.redact import BOOK
from bridge.runs.trace import mark

log = logging.getLogger(__name__)

MAX_LINE_BYTES: Final = 50 * 1024 * 1024
# Past this many bytes waiting in stdout's buffer, frames wait their turn (`send` drains).
WRITE_HIGH_WATER: Final = 1024 * 1024


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
        mark("client.out")
        try:
            self._writer.write(BOOK.acp_lines(lines))  # the last line of redaction (redact.py)
        except (ConnectionError, OSError, RuntimeError):
            return False
        return True

    async def send(self, message: dict[str, Any]) -> None:
        await self.write(orjson.dumps(message) + b"\n")

    async def write(self, lines: bytes) -> None:
        """Write frames serialized already, then wait while stdout's buffer is full."""
        if self.closed:
            raise ConnectionError("stdout is closed")
        self._writer.write(BOOK.acp_lines(lines))  # the last line of redaction (redact.py)
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
                mark("client.in")
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
