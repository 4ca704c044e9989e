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
_PATH: Final = os.environ.get(TRACE_ENV) or None
_ring: collections.deque[tuple[str, int]] | None = collections.deque(maxlen=RING_SIZE) if _PATH else None
_clock = time.monotonic_ns


def mark(name: str) -> None:
    """Note that the path reached `name` now (nothing when tracing is off)."""
    if _ring is not None:
        _ring.append((name, _clock()))


def _dump() -> None:
    if _ring is None or _PATH is None:
        return
    try:
        with open(_PATH, "w", encoding="utf-8") as out:
            json.dump(list(_ring), out)
    except OSError:
        pass


if _ring is not None:
    atexit.register(_dump)
