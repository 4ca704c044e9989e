"""The bridge's big freed blocks go back to the system (bridge/process/memory.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Frees a big block (glibc then raises its threshold), takes a second one and a small object
# above it, frees the big one, and prints how much the process grew.
PROGRAM = """
import sys
from bridge.process.memory import return_big_blocks
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
if sys.argv[1] == "fixed":
    assert return_big_blocks()
before = rss()
first = bytearray(24 * 2**20); del first
second = bytearray(24 * 2**20)
small = [bytes(100) for _ in range(1000)]
del second
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_big_block_is_returned_even_below_a_small_allocation() -> None:
    def grown(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", PROGRAM, mode], check=False, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    assert grown("glibc") > 16 * 2**20, "the case no longer keeps the block: the test cannot fail"
    assert grown("fixed") < 4 * 2**20
