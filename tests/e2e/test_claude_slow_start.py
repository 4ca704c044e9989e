"""A Claude Code that never answers its first `initialize` is a slow start, not a CLI without a
live mode: each prompt fails visibly and retryably, and the next one tries the live mode again
(a silent start once taken for "no live mode" ran every later prompt one process each, where
an MCP tool is never granted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.env import WAIT
from tests.support.raw import RawBridge

SILENT_CLAUDE = """\
import json, sys
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(sys.argv[2:]) + "\\n")
for _ in sys.stdin:  # reads every command, answers none, until its stdin closes
    pass
"""


def test_a_claude_code_silent_at_start_fails_retryably_and_is_tried_live_again(tmp_path: Path) -> None:
    script = tmp_path / "silent_claude.py"
    script.write_text(SILENT_CLAUDE)
    launches = tmp_path / "launches.jsonl"
    bridge = RawBridge(["--agent", "claude"], env={"PI_BRIDGE_CLAUDE_START_TIMEOUT": "1.5"})
    try:
        bridge.initialize(
            {
                "piCommand": [sys.executable, str(script), str(launches)],
                "warmPool": False,
                "checkpoints": False,
            }
        )
        for run_id in ("first", "second"):
            answer = bridge.call("pi/run", {"runId": run_id, "prompt": "hi", "cwd": str(tmp_path)}, WAIT)
            result = answer["result"]
            assert result["status"] == "failed", result
            assert result["error"]["kind"] == "stalled" and result["error"]["retryable"] is True, result
            assert "did not answer" in result["error"]["message"], result
            assert bridge.run_messages(run_id)[-1]["type"] == "terminal.failed"
        argvs = [json.loads(line) for line in launches.read_text().splitlines()]
        assert len(argvs) == 2, argvs
        assert all("--input-format" in argv for argv in argvs), f"a prompt ran without the live mode: {argvs}"
    finally:
        bridge.close()
