"""A stand-in for pi that reads the prompt, prints a start, leaves a `sleep` child that outlives
its own death on SIGTERM, and waits: the agent of the crowd benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
import time

START = (
    b'{"type":"session","version":3,"id":"crowd","timestamp":"2026-01-01T00:00:00Z","cwd":"."}\n'
    b'{"type":"agent_start"}\n'
)


def main() -> None:
    while os.read(0, 65536):
        pass
    subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    sys.stdout.buffer.write(START)
    sys.stdout.flush()
    time.sleep(300)


if __name__ == "__main__":
    main()
