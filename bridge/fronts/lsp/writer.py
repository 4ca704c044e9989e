"""Outbound transport: a client that stops reading never blocks the loop, and a reading one waits
for no thread (straight to stdout while nothing is queued, else one writer thread)."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import select
import stat
import threading
from typing import Any, BinaryIO

import orjson

from bridge.fronts.backpressure import HIGH_WATER, LOW_WATER, Backpressure
from bridge.policy.redact import BOOK
from bridge.runs.trace import mark

log = logging.getLogger(__name__)


def frame(body: bytes) -> bytes:
    """Wrap a JSON body in LSP base-protocol framing."""
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def notification_frame(method: str, params: Any) -> bytes:
    """Serialize a JSON-RPC notification straight to a framed message (the hot path)."""
    return frame(orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}))


def own_pipe(fd: int) -> bool:
    """Whether `fd` is a pipe or socket that stderr does not share (safe to make non-blocking)."""
    try:
        out = os.fstat(fd)
    except OSError:
        return False
    if not (stat.S_ISFIFO(out.st_mode) or stat.S_ISSOCK(out.st_mode)):
        return False
    try:
        err = os.fstat(2)
    except OSError:
        return True
    return (err.st_dev, err.st_ino) != (out.st_dev, out.st_ino)


class QueuedWriter:
    """pygls-compatible writer (`write`, `close`): straight to the fd while nothing waits, else
    through a queue and one writer thread."""

    def __init__(
        self,
        stream: BinaryIO,
        *,
        high_water: int = HIGH_WATER,
        low_water: int = LOW_WATER,
        direct: bool | None = None,
    ) -> None:
        self._fd = stream.fileno()
        self._direct = own_pipe(self._fd) if direct is None else direct
        if self._direct:
            os.set_blocking(self._fd, False)
        self._closed = False
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._pressure = Backpressure(high_water=high_water, low_water=low_water)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drained = threading.Event()
        self._drained.set()
        self.broken = False
        self.bytes_written = 0
        self._thread = threading.Thread(target=self._run, name="pi-bridge-writer", daemon=True)
        self._thread.start()

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tell the writer which loop's waiters to wake; call from that loop."""
        self._loop = loop

    def write(self, data: bytes) -> None:
        """Write framed messages, or queue what the pipe does not take now; never blocks.
        Every frame passes the last line of redaction first (redact.BOOK: a frame without a
        secret in it costs a substring search per secret)."""
        mark("client.out")
        if self.broken or self._closed:
            return
        data = BOOK.lsp_frames(data)
        if self._direct and self._pending == 0:
            # Nothing queued means the thread is idle: writing here keeps the order.
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self._client_gone(exc)
                return
            self.bytes_written += written
            if written == len(data):
                return
            data = data[written:]
        with self._lock:
            self._pending += len(data)
            over = self._pending > self._pressure.high_water
            if self._drained.is_set():  # cleared once per burst, not once per frame
                self._drained.clear()
        if over:
            self._pressure.hold()
        self._queue.put(data)

    async def wait_writable(self) -> None:
        """Wait while the backlog is above the high-water mark."""
        await self._pressure.wait_writable()

    @property
    def pending_bytes(self) -> int:
        """Bytes queued but not yet written."""
        return self._pending

    def drain(self, timeout: float) -> bool:
        """Block until everything queued is written (or the client is gone); False on timeout."""
        return self._drained.wait(timeout)

    def close(self) -> None:
        """Stop the writer thread once the queue is written (stdout is left blocking again)."""
        self._closed = True
        self._queue.put(None)

    def _client_gone(self, exc: OSError) -> None:
        # The client closed its end: nothing more can be delivered; runs go on to their
        # cleanup, which must not depend on the client.
        self.broken = True
        log.warning("client stopped reading (%s); dropping further output", exc)

    def _write_all(self, data: bytes) -> None:
        """Write one frame whole from the writer thread, waiting for room in a full pipe."""
        try:
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._fd, view)
                except BlockingIOError:
                    select.select([], [self._fd], [])  # a full pipe: wait for room
                    continue
                view = view[written:]
            self.bytes_written += len(data)
        except OSError as exc:
            self._client_gone(exc)

    def _run(self) -> None:
        while True:
            data = self._queue.get()
            if data is None:
                if self._direct:
                    try:
                        os.set_blocking(self._fd, True)
                    except OSError:
                        pass
                return
            if not self.broken:
                self._write_all(data)
            with self._lock:
                self._pending -= len(data)
                pending = self._pending
                if pending == 0:
                    self._drained.set()
            pressure = self._pressure
            if pending <= pressure.low_water and self._loop is not None and pressure.holding:
                self._loop.call_soon_threadsafe(pressure.release)
