"""The last step of the bridge's stop: every child still there is killed and reaped, a live one
and a zombie nobody waits on alike. Run in a process of its own (it ends all of its children)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.env import ROOT

SCRIPT = """
import asyncio, json, os, subprocess
from bridge.process import procfs, spawn
live = subprocess.Popen(["sleep", "300"])  # a child no stop holds
zombie = os.fork()
if zombie == 0:
    os._exit(0)  # dead at once, and nobody waits on it
found = asyncio.run(spawn.end_strays(10))
left = procfs.own_children()
print(json.dumps({"found": found, "live": live.pid, "zombie": zombie, "left": left,
                  "in_proc": [p for p in (live.pid, zombie) if os.path.exists(f"/proc/{p}")]}))
"""


def test_the_stop_kills_and_reaps_every_child_left() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["live"] in seen["found"], seen
    assert seen["left"] == [] and seen["in_proc"] == [], "nothing of either is left, not even a zombie"
