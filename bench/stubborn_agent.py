"""A stand-in for pi that ignores the interrupt: it starts streaming, then ignores SIGTERM and SIGINT.

Used by the cancel benchmark: the bridge's graceful wait (2 s) must run out and the kill stage
must end it, so the cancel answers just over 2 s after it was sent.
"""

from __future__ import annotations

import os
import signal
import sys
import time

EVENTS = (
    b'{"type":"session","version":3,"id":"stubborn-session","timestamp":"2026-01-01T00:00:00.000Z","cwd":"."}\n'
    b'{"type":"agent_start"}\n'
    b'{"type":"turn_start"}\n'
    b'{"type":"message_start","message":{"role":"assistant","content":[],"stopReason":"stop"}}\n'
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_start","contentIndex":0}}\n'
    b'{"type":"message_update","assistantMessageEvent":'
    b'{"type":"text_delta","contentIndex":0,"delta":"I will not stop. "}}\n'
)


def main() -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.read(0, 1 << 16):
        pass
    sys.stdout.buffer.write(EVENTS)
    sys.stdout.buffer.flush()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
