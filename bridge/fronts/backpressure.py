"""Both fronts' backpressure: runs stop reading their agent's output while the client is behind."""

from __future__ import annotations

import asyncio
from typing import Final

HIGH_WATER: Final = 8 * 1024 * 1024
LOW_WATER: Final = 2 * 1024 * 1024


class Backpressure:
    """The writable flag between the two marks, waited on by the run registry (`wait_writable`)."""

    def __init__(self, *, high_water: int = HIGH_WATER, low_water: int = LOW_WATER) -> None:
        self.high_water = high_water
        self.low_water = low_water
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def holding(self) -> bool:
        """Whether runs are held (the backlog passed the high-water mark and has not drained)."""
        return not self._writable.is_set()

    def note(self, waiting: int) -> None:
        """The bytes now waiting for the client: hold above the high mark, release at the low."""
        if waiting > self.high_water:
            self.hold()
        elif waiting <= self.low_water:
            self.release()

    def hold(self) -> None:
        """Hold the runs until `release`."""
        if self._writable.is_set():
            self._writable.clear()

    def release(self) -> None:
        """Let the runs read again."""
        self._writable.set()

    async def wait_writable(self) -> None:
        """Wait while the backlog is above the high-water mark (the run registry's hook)."""
        if not self._writable.is_set():
            await self._writable.wait()
