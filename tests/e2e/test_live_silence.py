"""A live pi's silence counts from its prompt: the time it takes to start (a Node start-up on a
loaded machine, an extension that loads slowly) is not silence, and must not get the run killed
as `stalled` the moment its prompt goes out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import requires_pi
from tests.support.env import WAIT, agent_dir_with_extension
from tests.support.raw import RawBridge

pytestmark = [requires_pi, pytest.mark.realpi, pytest.mark.slow]

SILENCE_S = 1.5
# Longer than the silence limit: a bridge that counted pi's start-up as silence stops it at once.
START_DELAY_S = 2.5

# Blocks pi's start for START_DELAY_S (it loads its extensions before it answers anyone), after
# writing when it began, so the test knows pi's start did take longer than the silence limit.
SLOW_LOADING = f"""
import {{ writeFileSync }} from "node:fs";
export default function (pi) {{
  writeFileSync(process.env.SLOW_START_MARK, String(Date.now()));
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, {int(START_DELAY_S * 1000)});
}}
"""


def test_a_live_pi_slower_to_start_than_the_silence_limit_runs_its_prompt(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    agent_dir = agent_dir_with_extension(pi_agent_dir, tmp_path / "pi-agent", "slow.ts", SLOW_LOADING)
    mark = tmp_path / "loading-since"
    work = tmp_path / "work"
    work.mkdir()
    raw = RawBridge()
    try:
        env = {"PI_CODING_AGENT_DIR": str(agent_dir), "SLOW_START_MARK": str(mark)}
        raw.initialize({"env": env, "warmPool": False, "silenceTimeoutMs": int(SILENCE_S * 1000)})
        asked = time.time()
        params = {"prompt": "hi", "provider": "fake", "model": "text", "cwd": str(work)}
        result = raw.call("pi/run", {"runId": "slow-start", **params}, WAIT)["result"]
        assert mark.exists(), "pi never loaded the slow extension: the test proves nothing"
        loaded = mark.read_text()
        assert time.time() - asked >= START_DELAY_S > SILENCE_S
        assert result["status"] == "completed", result.get("error")
        assert result["attempts"] == 1
        assert result["text"], result
        # The conversation's next prompt goes to the same pi: it was never stopped (a new one
        # would load the extension again).
        follow = {"runId": "follow", **params, "sessionId": result["sessionId"]}
        again = raw.call("pi/run", follow, WAIT)["result"]
        assert again["status"] == "completed", again.get("error")
        assert mark.read_text() == loaded, "the conversation's pi was stopped and started again"
    finally:
        raw.close()
