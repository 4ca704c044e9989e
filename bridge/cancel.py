"""The cancel token passed from the request handler all the way down to the process supervisor."""

from __future__ import annotations

import anyio


class CancelToken:
    """A one-shot cancellation request that any layer can check or wait on.

    Unlike cancelling an asyncio task, setting the token interrupts nothing by itself: each layer
    reacts at a point where stopping is safe, and the cleanup it then runs cannot be cut short by
    a second cancel.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled by the client") -> bool:
        """Request cancellation; returns False if it was already requested."""
        if self._event.is_set():
            return False
        self.reason = reason
        self._event.set()
        return True

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()

    async def wait(self) -> None:
        """Wait until cancellation is requested."""
        await self._event.wait()
