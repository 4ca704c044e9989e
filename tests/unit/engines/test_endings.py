"""The endings both engines share name the agent that ran: a silent Claude Code is no silent pi."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from bridge.agents.claude import ClaudeAgent
from bridge.agents.values import Out, RunOptions
from bridge.engines.attempt import AttemptContext
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptLimits, exit_status
from bridge.engines.one_process import ProcessAttempt

pytestmark = pytest.mark.anyio

# An agent command that prints nothing and waits (Claude Code's flags land in its argv, unread).
SILENT = (sys.executable, "-c", "import time; time.sleep(60)")
WAIT = 30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_silent_claude_code_is_named_in_its_stall_error(tmp_path: Path) -> None:
    sent: list[Out] = []
    attempt = ProcessAttempt(
        AttemptContext(
            ClaudeAgent(),
            SILENT,
            RunOptions(prompt="hi", cwd=str(tmp_path)),
            sent.extend,
            CancelToken(),
            AttemptLimits(silence_seconds=0.5),
        )
    )
    with anyio.fail_after(WAIT):
        outcome = await attempt.run()
    assert outcome.status == "failed" and outcome.error is not None, outcome
    assert outcome.error.kind == "stalled" and outcome.error.retryable
    assert outcome.error.message == "Claude Code printed nothing for 0.5 s and was stopped"
    assert outcome.shutdown is not None and outcome.shutdown.survivors == []
    assert [out.type for out in sent if out.type.startswith("terminal.")] == ["terminal.failed"]


def test_an_exit_status_is_a_code_or_a_signal() -> None:
    assert exit_status(None) == (None, None)
    assert exit_status(3) == (3, None)
    assert exit_status(-signal.SIGKILL) == (None, "SIGKILL")
    assert exit_status(-200) == (None, "signal 200")
