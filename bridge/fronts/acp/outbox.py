"""The ACP front's outgoing session/updates: straight to stdout while it keeps up, else queued in
order for one pump; the backlog drives the fronts' backpressure (bridge/fronts/backpressure.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson

from bridge.fronts.acp.updates import Update, WireUpdate
from bridge.fronts.backpressure import Backpressure

if TYPE_CHECKING:
    from bridge.fronts.acp.transport import StdioTransport

log = logging.getLogger(__name__)

#: A session/update for a session: its id and the update.
SessionUpdate = tuple[str, Update | WireUpdate]


class Outbox:
    """session/update frames on their way to the client, in order, with the flush marks between them."""

    def __init__(self) -> None:
        self.transport: StdioTransport | None = None
        self._queue: asyncio.Queue[bytes | asyncio.Event] = asyncio.Queue()
        self._queued_bytes = 0
        self._pump_sending = False
        self._pressure = Backpressure()

    @property
    def idle(self) -> bool:
        """Whether nothing waits in line (a frame written now goes out in order)."""
        return not self._pump_sending and self._queue.empty()

    def send(self, updates: list[SessionUpdate]) -> None:
        """Straight to stdout, in one write, while nothing waits ahead of them and stdout keeps
        up; else in line for the pump. (Through the pump, each update costs a loop trip.)"""
        frames = [frame(notification(s, u)) for s, u in updates]
        transport = self.transport
        if transport is None or not self.idle or not transport.write_now(b"".join(frames)):
            for one in frames:
                self._put(one)
        self.note_backlog()

    def send_one(self, session_id: str, update: Update | WireUpdate) -> None:
        """One session/update (see `send`)."""
        self.send([(session_id, update)])

    def queue(self, updates: list[SessionUpdate]) -> None:
        """In line for the pump, whatever waits ahead (a replay of many updates)."""
        for session_id, update in updates:
            self._put(frame(notification(session_id, update)))
        self.note_backlog()

    def _put(self, one: bytes) -> None:
        self._queued_bytes += len(one)
        self._queue.put_nowait(one)

    async def pump(self) -> None:
        """Send the queued session/updates in order (a prompt's answer waits for its own)."""
        while True:
            item = await self._queue.get()
            if isinstance(item, asyncio.Event):
                item.set()
                continue
            self._pump_sending = True
            try:
                await self._send_queued(item)
            finally:
                self._pump_sending = False

    async def _send_queued(self, one: bytes) -> None:
        self._queued_bytes -= len(one)
        if self.transport is None:
            return
        try:
            await self.transport.write(one)
        except (ConnectionError, OSError) as exc:
            log.info("session/update not sent: %s", exc)
        self.note_backlog()

    def note_backlog(self) -> None:
        """The bytes waiting for the client (the queue and stdout's buffer), to the backpressure."""
        transport = self.transport
        self._pressure.note(self._queued_bytes + (transport.buffered_bytes if transport is not None else 0))

    async def wait_writable(self) -> None:
        """Wait while the backlog is above the high-water mark (the run registry's hook)."""
        await self._pressure.wait_writable()

    async def flush(self) -> None:
        """Wait until every update queued so far is sent (at once when none waits in line)."""
        if self.idle:
            return
        mark = asyncio.Event()
        self._queue.put_nowait(mark)
        await mark.wait()


def notification(session_id: str, update: Update | WireUpdate) -> dict[str, Any]:
    """The session/update notification carrying `update`."""
    if not isinstance(update, dict):
        update = update.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }


def frame(message: dict[str, Any]) -> bytes:
    """One NDJSON frame."""
    return orjson.dumps(message) + b"\n"
