"""The bridge's trace ring (bridge/process/trace.py): marks written at exit when asked, none
otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bridge.process.trace import TRACE_ENV

_SCRIPT = (
    "from bridge.process import trace\n"
    "trace.start_from_environment()\n"
    "trace.mark('client.in')\n"
    "trace.mark('pi.stdin')\n"
)


def _run(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True, timeout=60)


def test_marks_are_written_in_order_at_exit_when_the_trace_is_on(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    _run({**os.environ, TRACE_ENV: str(out)})
    marks = json.loads(out.read_text())
    assert [name for name, _ in marks] == ["client.in", "pi.stdin"]
    assert 0 <= marks[1][1] - marks[0][1] < 10**9


def test_nothing_is_kept_or_written_when_the_trace_is_off(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != TRACE_ENV}
    _run({**env, "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []
    from bridge.process import trace

    if os.environ.get(TRACE_ENV) is None:
        trace.mark("x")
        assert trace._ring is None
