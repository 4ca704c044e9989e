"""The bridge's trace, read back: its marks on the clock the clients' times are on.

The bridge writes its marks ($PI_BRIDGE_TRACE) at its exit, each on CLOCK_MONOTONIC, the clock
`time.perf_counter` reads here: a mark and a client's time are on one line, so a client's time
splits into the bridge's own share and the agent's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

#: The bridge's trace marks: (name, seconds on CLOCK_MONOTONIC).
Marks = list[tuple[str, float]]


def trace_env(env: dict[str, str], trace: Path | None) -> dict[str, str]:
    """`env` with the bridge's trace written to `trace` at its exit (None: no trace)."""
    return {**env, "PI_BRIDGE_TRACE": str(trace)} if trace is not None else env


def read_marks(trace: Path, wait: float) -> Marks:
    """The bridge's trace marks (name, seconds), once its exit has written them (waited for
    `wait` s); none if it never did."""
    deadline = time.monotonic() + wait
    while not trace.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        return [(str(name), int(ns) / 1e9) for name, ns in json.loads(trace.read_text())]
    except (OSError, ValueError):
        return []


def first_mark(marks: Marks, name: str, after: float, before: float = float("inf")) -> float | None:
    """The first mark `name` in [after, before]."""
    return next((t for n, t in marks if n == name and after <= t <= before), None)


def last_mark(marks: Marks, name: str, after: float, before: float) -> float | None:
    """The last mark `name` in [after, before]."""
    found = [t for n, t in marks if n == name and after <= t <= before]
    return found[-1] if found else None
