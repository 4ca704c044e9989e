"""The bridge's own spans on a prompt's path: named monotonic timestamps in a small ring."""

from __future__ import annotations

import atexit
import collections
import json
import os
import time
from typing import Final

TRACE_ENV: Final = "PI_BRIDGE_TRACE"
RING_SIZE: Final = 4096
_path: str | None = None
_ring: collections.deque[tuple[str, int]] | None = None
_clock = time.monotonic_ns


def start_from_environment() -> None:
    """Keep marks from now on when $PI_BRIDGE_TRACE names a file; they are written there at exit.

    Called by the bridge's entry point, not at import: what imported this module first (a test's
    fork server) may not have the bridge's environment.
    """
    global _path, _ring
    path = os.environ.get(TRACE_ENV) or None
    if path is None or _ring is not None:
        return
    _path, _ring = path, collections.deque(maxlen=RING_SIZE)
    atexit.register(_dump)


def mark(name: str) -> None:
    """Note that the path reached `name` now (nothing when tracing is off)."""
    if _ring is not None:
        _ring.append((name, _clock()))


def _dump() -> None:
    if _ring is None or _path is None:
        return
    try:
        with open(_path, "w", encoding="utf-8") as out:
            json.dump(list(_ring), out)
    except OSError:
        pass
