"""The cancel token passed from the request handler all the way down to the process supervisor."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

log = logging.getLogger(__name__)


class CancelToken:
    """A one-shot cancellation request that any layer can check or wait on.

    Unlike cancelling an asyncio task, setting the token interrupts nothing by itself: each layer
    reacts at a point where stopping is safe, and the cleanup it then runs cannot be cut short by
    a second cancel.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []

    def cancel(self, reason: str = "cancelled by the client") -> bool:
        """Request cancellation; returns False if it was already requested."""
        if self._event.is_set():
            return False
        self.reason = reason
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a layer's first reaction must not stop the others'
                log.exception("a cancel callback failed")
        return True

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` (quick, synchronous) inside the call that requests cancellation, for
        a first step that must not wait for the loop (writing an agent's interrupt). Not run
        when cancellation was requested already: the waiters see to it. Returns the function
        that takes the callback back."""
        if self._event.is_set():
            return _nothing
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()

    async def wait(self) -> None:
        """Wait until cancellation is requested."""
        await self._event.wait()


def _nothing() -> None:
    return None
