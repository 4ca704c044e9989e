"""One exit path for both fronts: signals, the adopted orphans, and every run stopped before exit."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import anyio.abc

from bridge.runs.registry import RunRegistry

log = logging.getLogger(__name__)

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REAP_SECONDS: Final = 1.0


class Stop:
    """Why a front stops; the first request wins (a signal, end of input, the client's exit)."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.reason = ""

    def request(self, reason: str) -> None:
        """Ask the front to stop every run and exit."""
        if not self.requested.is_set():
            self.reason = reason
            self.requested.set()


async def serve_until_stopped(
    registry: RunRegistry,
    stop: Stop,
    *,
    name: str,
    start_front: Callable[[anyio.abc.TaskGroup], None],
    cancel_reason: Callable[[str], str],
    finish_front: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve the registry and the front's tasks (`start_front`) until `stop` is requested; then
    stop every run, let the front finish (`finish_front`, shielded too) and reap."""
    loop = asyncio.get_running_loop()
    for signum in SIGNALS:
        loop.add_signal_handler(signum, stop.request, f"signal {signal.Signals(signum).name}")
    subreaper = registry.adopt_orphans()
    log.info("%s serving on stdio (pid %d, subreaper=%s)", name, os.getpid(), subreaper)
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(registry.serve)
            start_front(tasks)
            tasks.start_soon(_reap_periodically, registry)
            await stop.requested.wait()
            log.info("stopping: %s", stop.reason)
            registry.close()
            with anyio.CancelScope(shield=True):
                await registry.stop_all(cancel_reason(stop.reason))
                if finish_front is not None:
                    await finish_front()
            tasks.cancel_scope.cancel()
    finally:
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)
        registry.reap_orphans()


async def _reap_periodically(registry: RunRegistry) -> None:
    """Adopted orphans (we are a subreaper) must be reaped or they linger as zombies."""
    while True:
        await anyio.sleep(REAP_SECONDS)
        registry.reap_orphans()
