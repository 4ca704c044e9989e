"""Inbound framing: read LSP base-protocol frames from stdin and hand them to the protocol.

pygls's own loop logs and drops a body that is not JSON and never answers; here a broken frame
gets the JSON-RPC error the spec names (-32700 parse error, -32600 invalid request, id null when
unknown) and the reader goes on with the next frame. End of input asks the server to stop.

Bodies are parsed (orjson) on the reader thread, never on the event loop, and the inbox between
the two is bounded in frames and bytes: when the loop falls behind, the reader thread stops
reading, so the client blocks on its pipe. Backpressure, never a dropped frame.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

import orjson
from lsprotocol.types import METHOD_TO_TYPES
from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCProtocol

from bridge.contract import RUN
from bridge.transport import frame

log = logging.getLogger(__name__)

MAX_HEADER_LINE: Final = 8 * 1024
MAX_BODY: Final = 512 * 1024 * 1024
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


def error_frame(code: int, message: str, msg_id: Any = None) -> bytes:
    """A framed JSON-RPC error response."""
    body = {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    return frame(json.dumps(body).encode())


class _FdStream:
    """Minimal buffered reads straight from a file descriptor.

    The reader thread is a daemon; a `BufferedReader` it is blocked in at interpreter exit would
    abort the process (its lock cannot be taken), while a bare `os.read` holds no lock.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = os.read(self._fd, 1 << 20)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def readline(self, limit: int) -> bytes:
        while True:
            end = self._buffer.find(b"\n", 0, limit)
            if end >= 0:
                return self._take(end + 1)
            if len(self._buffer) >= limit or not self._fill():
                return self._take(min(limit, len(self._buffer)))

    def read(self, size: int) -> bytes:
        if not self._buffer:
            self._fill()
        return self._take(min(size, len(self._buffer)))

    def _take(self, size: int) -> bytes:
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


class FrameReader:
    """Blocking frame reader over a file descriptor; one frame body (or an error text) per call."""

    def __init__(self, fd: int) -> None:
        self._stream = _FdStream(fd)

    def next(self) -> tuple[bytes | None, str | None]:
        """Return (body, None), (None, problem) for a broken frame, or (None, None) at end of input."""
        length: int | None = None
        saw_header = False
        problem: str | None = None
        while True:
            line = self._stream.readline(MAX_HEADER_LINE)
            if not line:
                return None, None
            if line in (b"\r\n", b"\n"):
                if not saw_header:
                    continue
                break
            saw_header = True
            if not line.endswith(b"\n"):
                problem = "header line too long"
                continue
            match = _CONTENT_LENGTH.search(line.rstrip(b"\r\n"))
            if match:
                length = int(match.group(1))
            elif b":" not in line:
                problem = f"malformed header line {line[:80]!r}"
        if length is None:
            return None, problem or "frame without Content-Length"
        if length > MAX_BODY:
            # Not skipped: a bogus length would swallow every later frame. The body, if any,
            # is read as junk header lines until the next Content-Length resynchronizes.
            return None, f"frame of {length} bytes exceeds the {MAX_BODY}-byte limit"
        body = self._read_exactly(length)
        if body is None:
            return None, None
        return body, problem

    def _read_exactly(self, length: int) -> bytes | None:
        chunks: list[bytes] = []
        remaining = length
        while remaining:
            chunk = self._stream.read(remaining)
            if not chunk:
                return None
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


@dataclass(slots=True)
class Inbound:
    """One item from the reader thread: a parsed message, or the error frame to answer instead;
    `end` at end of input. `size` is the body's length, for the inbox's byte bound."""

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
        # What orjson refuses but the stdlib (and so pygls) accepts: NaN, Infinity, lone
        # surrogates. Kept, so that such a frame still gets the answer it got before.
        return Inbound(message=json.loads(body), size=len(body))
    except (UnicodeDecodeError, ValueError) as exc:
        return Inbound(reply=error_frame(-32700, f"parse error: {exc}"), size=len(body))


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


def dispatch(body: bytes, protocol: JsonRPCProtocol) -> bytes | None:
    """Hand one frame body to the protocol; return an error frame to send if it is not valid."""
    inbound = parse(body)
    if inbound.reply is not None:
        return inbound.reply
    return dispatch_message(inbound.message, protocol)


def dispatch_message(raw: Any, protocol: JsonRPCProtocol) -> bytes | None:
    """Hand one parsed message to the protocol; return an error frame to send if it is not valid."""
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        return error_frame(-32600, "invalid request: expected a JSON-RPC 2.0 object")
    msg_id = raw.get("id")
    if "method" in raw and not isinstance(raw["method"], str):
        return error_frame(-32600, "invalid request: method must be a string", msg_id)
    method = raw.get("method")
    if "id" in raw and method in _NOTIFICATIONS:
        return error_frame(-32600, f"invalid request: {method} is a notification and takes no id", msg_id)
    if "id" not in raw and method in _REQUESTS_ONLY:
        log.warning("%s sent as a notification (no id) ignored: it could never be answered", method)
        return None
    try:
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


def _read_one(reader: FrameReader) -> Inbound:
    """The next frame from the client, parsed (reader thread)."""
    try:
        body, problem = reader.next()
    except (OSError, ValueError) as exc:
        log.warning("stdin failed: %s", exc)
        return Inbound(end=True)
    if body is not None:
        return parse(body)
    if problem is None:
        return Inbound(end=True)
    log.warning("broken frame from the client: %s", problem)
    return Inbound(reply=error_frame(-32700, f"parse error: {problem}"))


async def read_frames(stream: BinaryIO, protocol: JsonRPCProtocol, on_eof: Callable[[str], None]) -> None:
    """Read frames until end of input, dispatching each; then ask the server to stop.

    The blocking reads and the parsing run on a daemon thread of their own, not the loop's
    executor: a read blocked on an idle stdin must not keep the process alive after a signal or
    `exit`.
    """
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Inbound] = asyncio.Queue()
    budget = InboxBudget()
    reader = FrameReader(stream.fileno())

    def pump() -> None:
        while True:
            item = _read_one(reader)
            budget.take(item.size)
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is gone
                return
            if item.end:
                return

    threading.Thread(target=pump, name="pi-bridge-reader", daemon=True).start()
    writer = protocol.writer
    while True:
        item = await inbox.get()
        if item.end:
            break
        reply = item.reply if item.reply is not None else dispatch_message(item.message, protocol)
        budget.give_back(item.size)
        if reply is not None and writer is not None:
            writer.write(reply)
    on_eof("end of input")
