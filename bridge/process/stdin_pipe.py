"""The write end of an agent's stdin, owned by the bridge: a write goes out as it is made."""

from __future__ import annotations

import asyncio
import os


class StdinClosed(Exception):
    """The agent's stdin is closed (we closed it, or the agent's end went away)."""


class _PipeProtocol(asyncio.BaseProtocol):
    """Flow control and loss of one write pipe."""

    def __init__(self) -> None:
        self.paused = False
        self.lost = False
        self._waiters: list[asyncio.Future[None]] = []

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    async def resumed(self) -> None:
        """Wait until writing may go on (or the pipe is gone)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class StdinPipe:
    """A child's stdin: synchronous writes, backpressure on demand, an orderly close."""

    def __init__(self, transport: asyncio.WriteTransport, protocol: _PipeProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    @classmethod
    async def open(cls, write_fd: int) -> StdinPipe:
        """Wrap the write end of a pipe (the pipe now owns the fd)."""
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(write_fd, "wb", buffering=0)
        try:
            transport, protocol = await loop.connect_write_pipe(_PipeProtocol, pipe)
        except BaseException:
            pipe.close()
            raise
        return cls(transport, protocol)

    @property
    def closed(self) -> bool:
        """Whether writes can no longer reach the agent."""
        return self._protocol.lost or self._transport.is_closing()

    def write_now(self, data: bytes) -> None:
        """Hand `data` to the pipe now (what it cannot take yet is sent as it drains), in order
        with every earlier write. Raises StdinClosed when the agent's stdin is gone."""
        if self.closed:
            raise StdinClosed("the agent's stdin is closed")
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait while more than the high-water mark waits to be written. Raises StdinClosed
        when the agent's stdin went away meanwhile."""
        while self._protocol.paused and not self._protocol.lost:
            await self._protocol.resumed()
        if self._protocol.lost:
            raise StdinClosed("the agent's stdin is closed")

    def close(self) -> None:
        """EOF for the agent once what was written has gone out: the transport flushes the rest
        on its own (and drops it if the agent goes away first)."""
        if not self._transport.is_closing():
            self._transport.close()

    async def wait_closed(self) -> None:
        """Wait until the pipe is closed for good: flushed and closed, or its reader gone."""
        while not self._protocol.lost:
            await self._protocol.resumed()

    def close_now(self) -> None:
        """Drop the pipe at once (the agent is gone; whatever waited to be written is moot)."""
        if not self._transport.is_closing():  # a second abort would report the loss twice
            self._transport.abort()
