"""bridge/fronts/lifecycle.py: one exit path for both fronts, whatever asks for the stop.

Driven in-process with a stand-in registry: what is checked is the order of the way out (no
run starts once it begins, every run stopped before the front finishes, a last reap) and that
the first stop request's reason is the one that counts.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import cast

import anyio
import anyio.abc

from bridge.fronts.lifecycle import Stop, serve_until_stopped
from bridge.runs.registry import RunRegistry

WAIT = 10.0


class FakeRegistry:
    """Records what the lifecycle asks of the run registry, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._closing = anyio.Event()

    def adopt_orphans(self) -> bool:
        self.calls.append("adopt_orphans")
        return False

    def reap_orphans(self) -> None:
        self.calls.append("reap_orphans")

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.calls.append("serve")
        task_status.started()
        await self._closing.wait()

    def close(self) -> None:
        self.calls.append("close")
        self._closing.set()

    async def stop_all(self, reason: str) -> None:
        self.calls.append(f"stop_all: {reason}")


async def serve(registry: FakeRegistry, stop: Stop, started: asyncio.Event) -> None:
    def start_front(tasks: anyio.abc.TaskGroup) -> None:
        registry.calls.append("front")
        started.set()

    async def finish_front() -> None:
        registry.calls.append("finish_front")

    await serve_until_stopped(
        cast(RunRegistry, registry),
        stop,
        name="test",
        start_front=start_front,
        cancel_reason=lambda why: f"stopping ({why})",
        finish_front=finish_front,
    )


async def test_a_stop_request_stops_every_run_before_the_front_finishes() -> None:
    registry, stop, started = FakeRegistry(), Stop(), asyncio.Event()
    task = asyncio.create_task(serve(registry, stop, started))
    await asyncio.wait_for(started.wait(), WAIT)
    stop.request("end of input")
    stop.request("signal SIGTERM")  # too late: the first reason counts
    await asyncio.wait_for(task, WAIT)
    assert stop.reason == "end of input"
    calls = [call for call in registry.calls if call != "reap_orphans"]
    assert calls == [
        "adopt_orphans",
        "serve",
        "front",
        "close",
        "stop_all: stopping (end of input)",
        "finish_front",
    ]
    assert registry.calls[-1] == "reap_orphans", "a last reap once everything has stopped"


async def test_a_signal_takes_the_same_way_out_and_its_handler_is_removed() -> None:
    registry, stop, started = FakeRegistry(), Stop(), asyncio.Event()
    task = asyncio.create_task(serve(registry, stop, started))
    await asyncio.wait_for(started.wait(), WAIT)
    os.kill(os.getpid(), signal.SIGHUP)
    await asyncio.wait_for(task, WAIT)
    assert stop.reason == "signal SIGHUP"
    assert "stop_all: stopping (signal SIGHUP)" in registry.calls
    assert not asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP), "the front's handler is gone"
