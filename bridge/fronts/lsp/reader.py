"""Inbound framing: read LSP base-protocol frames from stdin and hand them to the protocol."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

import orjson
from lsprotocol.types import METHOD_TO_TYPES
from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCProtocol

from bridge.contract import RUN
from bridge.fronts import surrogates
from bridge.fronts.lsp.writer import frame
from bridge.runs.trace import mark

log = logging.getLogger(__name__)

MAX_HEADER_LINE: Final = 8 * 1024
MAX_BODY: Final = 512 * 1024 * 1024
# A body up to this size is parsed on the loop (well under a millisecond); a bigger one aside.
INLINE_PARSE_BYTES: Final = 256 * 1024
# What may wait in the inbox for the loop; one frame is always admitted, however big.
INBOX_MAX_FRAMES: Final = 256
INBOX_MAX_BYTES: Final = 32 * 1024 * 1024
# Methods that only make sense as notifications, or only as requests (a notification is never
# answered, so a pi/run without an id would start an agent nobody can hear the end of).
_NOTIFICATIONS: Final = frozenset(
    method for method, (_, response, *_rest) in METHOD_TO_TYPES.items() if response is None
)
_REQUESTS_ONLY: Final = frozenset({RUN})
# Searched, not matched at the line start: after a body shorter or longer than its Content-Length
# (or one without any), the next frame's header line arrives glued to leftover body bytes.
_CONTENT_LENGTH = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*$", re.IGNORECASE)


def error_frame(code: int, message: str, msg_id: Any = None, data: Any = None) -> bytes:
    """A framed JSON-RPC error response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return frame(json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error}).encode())


class FrameParser:
    """Push-based framing: feed it what was read, take the complete frames out.

    Each frame is (body, None), (body, problem) for a body whose headers had a problem it
    survived, or (None, problem) for a frame that cannot be read. Bytes of an incomplete frame
    wait for the next feed; at end of input they are dropped.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._body_length: int | None = None
        self._length: int | None = None
        self._saw_header = False
        self._problem: str | None = None

    def feed(self, data: bytes) -> list[tuple[bytes | None, str | None]]:
        """Add `data`; return every frame it completed, in order."""
        self._buffer += data
        frames: list[tuple[bytes | None, str | None]] = []
        while (item := self._next()) is not None:
            frames.append(item)
        return frames

    def _next(self) -> tuple[bytes | None, str | None] | None:
        if self._body_length is None and not self._read_headers():
            return None
        if self._body_length is None:  # the headers ended in a frame that cannot be read
            return self._reset(None)
        if len(self._buffer) < self._body_length:
            return None
        return self._reset(self._take(self._body_length))

    def _read_headers(self) -> bool:
        """Consume header lines; True once they ended (the body length is set if readable)."""
        while True:
            end = self._buffer.find(b"\n", 0, MAX_HEADER_LINE)
            if end >= 0:
                line = self._take(end + 1)
            elif len(self._buffer) >= MAX_HEADER_LINE:
                line = self._take(MAX_HEADER_LINE)
            else:
                return False
            if line in (b"\r\n", b"\n"):
                if not self._saw_header:
                    continue
                self._end_headers()
                return True
            self._saw_header = True
            if not line.endswith(b"\n"):
                self._problem = "header line too long"
                continue
            match = _CONTENT_LENGTH.search(line.rstrip(b"\r\n"))
            if match:
                self._length = int(match.group(1))
            elif b":" not in line:
                self._problem = f"malformed header line {line[:80]!r}"

    def _end_headers(self) -> None:
        """The blank line after the headers: the body length is set if the frame can be read."""
        if self._length is None:
            self._problem = self._problem or "frame without Content-Length"
        elif self._length > MAX_BODY:
            # Not skipped: a bogus length would swallow every later frame. The body, if
            # any, is read as junk header lines until the next Content-Length resynchronizes.
            self._problem = f"frame of {self._length} bytes exceeds the {MAX_BODY}-byte limit"
        else:
            self._body_length = self._length

    def _reset(self, body: bytes | None) -> tuple[bytes | None, str | None]:
        item = (body, self._problem)
        self._body_length = self._length = self._problem = None
        self._saw_header = False
        return item

    def _take(self, size: int) -> bytes:
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


@dataclass(slots=True)
class Inbound:
    """One item from the reader thread: a parsed message, or the error frame to answer instead
    (b"": a frame refused with no answer due); `end` at end of input. `size` is the body's
    length, for the inbox's byte bound."""

    message: Any = None
    reply: bytes | None = None
    size: int = 0
    end: bool = False


def parse(body: bytes) -> Inbound:
    """Parse one frame body (on the reader thread)."""
    try:
        return Inbound(message=orjson.loads(body), size=len(body))
    except orjson.JSONDecodeError:
        pass
    try:
        # What orjson refuses but the stdlib (and so pygls) accepts: NaN, Infinity, integers
        # beyond 64 bits, lone surrogates; the first kept, so that such a frame still gets the
        # answer it got before, a lone surrogate refused (bridge/fronts/surrogates.py).
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Inbound(reply=error_frame(-32700, f"parse error: {exc}"), size=len(body))
    refused = surrogates.refusal(message)
    if refused is None:
        return Inbound(message=message, size=len(body))
    return Inbound(reply=refusal_frame(refused), size=len(body))


def refusal_frame(refused: surrogates.Refusal) -> bytes:
    """The error frame for a frame holding a lone surrogate; b"" when none is due."""
    if not refused.answer:
        log.warning("a notification or response refused: %s", refused.message)
        return b""
    data = (
        [{"field": refused.field, "message": surrogates.PROBLEM}]
        if refused.code == surrogates.INVALID_PARAMS
        else None
    )
    return error_frame(refused.code, refused.message, refused.msg_id, data)


class InboxBudget:
    """Bounds what the reader thread hands the loop: the thread waits while the inbox is full."""

    def __init__(self, max_frames: int = INBOX_MAX_FRAMES, max_bytes: int = INBOX_MAX_BYTES) -> None:
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._frames = 0
        self._bytes = 0
        self._changed = threading.Condition()

    def take(self, size: int) -> None:
        """Reserve room for one frame of `size` bytes (reader thread); blocks while full."""
        with self._changed:
            while self._frames and (self._frames >= self._max_frames or self._bytes + size > self._max_bytes):
                self._changed.wait()
            self._frames += 1
            self._bytes += size

    def give_back(self, size: int) -> None:
        """The loop has handled a frame of `size` bytes."""
        with self._changed:
            self._frames -= 1
            self._bytes -= size
            self._changed.notify()


# Serves a valid message itself ahead of pygls (True), or leaves it to pygls (False).
Direct = Callable[[dict[str, Any]], bool]


def _envelope_refusal(raw: Any) -> bytes | None:
    """The error frame for a message that is no usable JSON-RPC 2.0 envelope; None if it is one."""
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        return error_frame(-32600, "invalid request: expected a JSON-RPC 2.0 object")
    msg_id = raw.get("id")
    if "id" in raw and not usable_id(msg_id):
        # Not answerable under it, and pygls would hash it (a list or an object): refused before
        # anything starts, answered with id null as JSON-RPC says.
        return error_frame(-32600, "invalid request: id must be a string, a number or null")
    if "method" in raw and not isinstance(raw["method"], str):
        return error_frame(-32600, "invalid request: method must be a string", msg_id)
    method = raw.get("method")
    if "id" in raw and method in _NOTIFICATIONS:
        return error_frame(-32600, f"invalid request: {method} is a notification and takes no id", msg_id)
    return None


def dispatch_message(raw: Any, protocol: JsonRPCProtocol, direct: Direct | None = None) -> bytes | None:
    """Hand one parsed message to `direct`, else the protocol; return an error frame to send if it
    is not valid."""
    refusal = _envelope_refusal(raw)
    if refusal is not None:
        return refusal
    msg_id = raw.get("id")
    method = raw.get("method")
    if "id" not in raw and method in _REQUESTS_ONLY:
        log.warning("%s sent as a notification (no id) ignored: it could never be answered", method)
        return None
    try:
        if direct is not None and direct(raw):
            return None
        message = protocol.structure_message(raw)
        if message is raw:
            return error_frame(-32600, "invalid request", msg_id)
        protocol.handle_message(message)
    except JsonRpcException as exc:
        return error_frame(exc.code, exc.message, msg_id) if "method" in raw and msg_id is not None else None
    except Exception as exc:  # the bridge never dies from what a client sends
        log.exception("could not handle a client message")
        if "method" in raw and msg_id is not None:
            return error_frame(-32603, f"internal error: {exc}", msg_id)
    return None


def usable_id(msg_id: Any) -> bool:
    """Whether a request id is one JSON-RPC allows: a string, a number or null."""
    return msg_id is None or (isinstance(msg_id, (str, int, float)) and not isinstance(msg_id, bool))


def _inbound(body: bytes | None, problem: str | None) -> Inbound:
    """What one frame from the parser becomes: the parsed message, or the error to answer."""
    if body is not None:
        return parse(body)
    log.warning("broken frame from the client: %s", problem)
    return Inbound(reply=error_frame(-32700, f"parse error: {problem}"))


def reads_on_loop(fd: int) -> bool:
    """Whether stdin can be read by the event loop itself: a pipe or socket (made non-blocking).
    A terminal is read by a thread: the flag would reach every process sharing it."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Dispatcher:
    """Hands inbound items to the protocol on the loop and writes what it answers itself."""

    def __init__(self, protocol: JsonRPCProtocol, direct: Direct | None) -> None:
        self._protocol = protocol
        self._direct = direct

    def handle(self, item: Inbound) -> None:
        reply = item.reply
        if reply is None:
            reply = dispatch_message(item.message, self._protocol, self._direct)
        writer = self._protocol.writer
        if reply and writer is not None:
            writer.write(reply)


class _LoopReader(asyncio.Protocol):
    """stdin read by the event loop: each frame is dispatched in the callback that read it.

    A body above INLINE_PARSE_BYTES is parsed on a worker thread while reading pauses, so the
    loop never stalls on a huge prompt and frames stay in order; while the loop is busy it does
    not read, so a fast client blocks on its pipe (backpressure, never a dropped frame).
    """

    def __init__(self, dispatcher: _Dispatcher, ended: asyncio.Future[None]) -> None:
        self._dispatcher = dispatcher
        self._ended = ended
        self._parser = FrameParser()
        self._pending: collections.deque[tuple[bytes | None, str | None]] = collections.deque()
        self._transport: asyncio.ReadTransport | None = None
        self._parsing = False
        self._eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        mark("client.in")
        self._pending.extend(self._parser.feed(data))
        self._drain()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._drain()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.warning("stdin failed: %s", exc)
        self._eof = True
        self._drain()

    def _drain(self) -> None:
        while self._pending and not self._parsing:
            body, problem = self._pending.popleft()
            if body is not None and len(body) > INLINE_PARSE_BYTES:
                self._parsing = True
                if self._transport is not None and not self._transport.is_closing():
                    self._transport.pause_reading()
                asyncio.get_running_loop().create_task(self._parse_aside(body))
                return
            self._dispatcher.handle(_inbound(body, problem))
        if self._eof and not self._pending and not self._parsing and not self._ended.done():
            self._ended.set_result(None)

    async def _parse_aside(self, body: bytes) -> None:
        try:
            item = await asyncio.to_thread(parse, body)
        except BaseException:
            if not self._ended.done():
                self._ended.set_result(None)
            raise
        self._dispatcher.handle(item)
        self._parsing = False
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        self._drain()


async def read_frames(
    stream: BinaryIO,
    protocol: JsonRPCProtocol,
    on_eof: Callable[[str], None],
    direct: Direct | None = None,
) -> None:
    """Read frames until end of input, dispatching each in order (to `direct` first, if given);
    then ask the server to stop.

    A pipe or socket is read by the loop itself (no thread hop on the way to a handler); a
    terminal by a daemon thread of its own, not the loop's executor: a read blocked on an idle
    stdin must not keep the process alive after a signal or `exit`.
    """
    fd = stream.fileno()
    dispatcher = _Dispatcher(protocol, direct)
    if reads_on_loop(fd):
        await _serve_on_loop(fd, dispatcher)
    else:
        await _serve_on_thread(fd, dispatcher)
    on_eof("end of input")


async def _serve_on_loop(fd: int, dispatcher: _Dispatcher) -> None:
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    pipe = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 (the transport owns it)
    transport, _ = await loop.connect_read_pipe(lambda: _LoopReader(dispatcher, ended), pipe)
    try:
        await ended
    finally:
        transport.close()
        try:
            os.set_blocking(fd, True)  # as it was: whoever reads stdin after us expects it
        except OSError:
            pass


async def _serve_on_thread(fd: int, dispatcher: _Dispatcher) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Inbound] = asyncio.Queue()
    budget = InboxBudget()

    def pump() -> None:
        parser = FrameParser()
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as exc:
                log.warning("stdin failed: %s", exc)
                chunk = b""
            items = [_inbound(body, problem) for body, problem in parser.feed(chunk)] if chunk else []
            if not chunk:
                items.append(Inbound(end=True))
            for item in items:
                budget.take(item.size)
                try:
                    loop.call_soon_threadsafe(inbox.put_nowait, item)
                except RuntimeError:  # the loop is closed: the server is gone
                    return
            if not chunk:
                return

    threading.Thread(target=pump, name="pi-bridge-reader", daemon=True).start()
    while True:
        item = await inbox.get()
        if item.end:
            break
        dispatcher.handle(item)
        budget.give_back(item.size)
