"""`pi --mode rpc` driven directly over the stdio peer: the floor of a live conversation."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.common import base_env
from bench.model import PROVIDER, ModelEnv
from bridge import agents
from bridge.agents.values import LaunchSpec, RunOptions
from bridge.tools.stdio_client import NDJSON, StdioPeer

Record = dict[str, Any]


class PiRpc(StdioPeer):
    """A pi in rpc mode: every record it prints is kept with its arrival time in `lines`."""

    dumps = staticmethod(orjson.dumps)

    def __init__(
        self, model: ModelEnv, argv: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(
            argv or ["pi", "--mode", "rpc", "--provider", PROVIDER, "--model", "text"],
            framing=NDJSON,
            env=env or {**base_env(), **model.pi_env()},
            cwd=str(model.workdir),
            stderr=subprocess.DEVNULL,
        )
        self.spawned = self.spawned_at
        self.lines: list[tuple[float, Record]] = []
        self._cond = threading.Condition()
        self.start_reader("pi-rpc-reader")

    def received(self, now: float, bodies: list[bytes]) -> None:
        records = []
        for body in bodies:
            try:
                records.append(orjson.loads(body))
            except orjson.JSONDecodeError:
                continue
        self.on_records(now, records)
        with self._cond:
            self.lines.extend((now, record) for record in records)
            self._cond.notify_all()

    def ended(self) -> None:
        with self._cond:
            super().ended()
            self._cond.notify_all()

    def on_records(self, now: float, records: list[Record]) -> None:
        """The records one read brought, on the reader thread before they are kept (a subclass
        answers what pi asks here)."""

    def wait(self, predicate: Callable[[Record], bool], start: int, timeout: float = 60) -> float:
        """The arrival time of the first record at index >= start matching predicate."""
        deadline = time.perf_counter() + timeout
        with self._cond:
            while True:
                for at, record in self.lines[start:]:
                    if predicate(record):
                        return at
                left = deadline - time.perf_counter()
                if left <= 0 or self.eof:
                    raise TimeoutError("raw pi did not answer" if left <= 0 else "raw pi ended its output")
                self._cond.wait(left)

    def prompt(self, message: str) -> tuple[float, float]:
        """One prompt: (to its first text delta, to agent_settled), seconds."""
        start = len(self.lines)
        sent = self.send({"type": "prompt", "message": message})
        first = self.wait(
            lambda r: (
                r.get("type") == "message_update"
                and (r.get("assistantMessageEvent") or {}).get("type") == "text_delta"
            ),
            start,
        )
        settled = self.wait(lambda r: r.get("type") == "agent_settled", start)
        return first - sent, settled - sent

    def close(self) -> None:
        """Close stdin and wait; kill pi by its pid if it does not exit."""
        try:
            self.close_stdin()
        except OSError:
            pass
        self.wait_exit(10)


def live_pi_launch(options: RunOptions) -> LaunchSpec:
    """The launch the bridge gives a live pi for `options` (through the agents' index and seam)."""
    live = agents.build_adapter("pi").live_mode()
    if live is None:
        raise RuntimeError("the pi adapter has no live mode")
    return live.launch_spec(("pi",), options)
