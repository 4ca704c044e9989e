"""Inbound framing: read LSP base-protocol frames from stdin and hand them to the protocol.

pygls's own loop logs and drops a body that is not JSON and never answers; here a broken frame
gets the JSON-RPC error the spec names (-32700 parse error, -32600 invalid request, id null when
unknown) and the reader goes on with the next frame. End of input asks the server to stop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Final

from lsprotocol.types import METHOD_TO_TYPES
from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCProtocol

from bridge.contract import RUN
from bridge.transport import frame

log = logging.getLogger(__name__)

MAX_HEADER_LINE: Final = 8 * 1024
MAX_BODY: Final = 512 * 1024 * 1024
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


def dispatch(body: bytes, protocol: JsonRPCProtocol) -> bytes | None:
    """Hand one frame body to the protocol; return an error frame to send if it is not valid."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return error_frame(-32700, f"parse error: {exc}")
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


async def read_frames(stream: BinaryIO, protocol: JsonRPCProtocol, on_eof: Callable[[str], None]) -> None:
    """Read frames until end of input, dispatching each; then ask the server to stop.

    The blocking reads run on a daemon thread of their own, not the loop's executor: a read
    blocked on an idle stdin must not keep the process alive after a signal or `exit`.
    """
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[bytes | None, str | None]] = asyncio.Queue()
    reader = FrameReader(stream.fileno())

    def pump() -> None:
        while True:
            try:
                item = reader.next()
            except (OSError, ValueError) as exc:
                item = (None, None)
                log.warning("stdin failed: %s", exc)
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is gone
                return
            if item == (None, None):
                return

    threading.Thread(target=pump, name="pi-bridge-reader", daemon=True).start()
    writer = protocol.writer
    while True:
        body, problem = await inbox.get()
        if body is None and problem is None:
            break
        reply: bytes | None
        if body is None:
            log.warning("broken frame from the client: %s", problem)
            reply = error_frame(-32700, f"parse error: {problem}")
        else:
            reply = dispatch(body, protocol)
        if reply is not None and writer is not None:
            writer.write(reply)
    on_eof("end of input")
