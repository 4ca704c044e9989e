"""A cancel that arrives while the agent is being started: the agent never gets the prompt.

The window is the `await spawn()` of one attempt, a few ms that no client can hit on purpose; the
test widens it with the real spawn followed by the cancel, then checks what the real (fake) agent
read on its stdin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.pi import PiAgent
from bridge.agents.values import Out, RunOptions
from bridge.engines import one_process as provider
from bridge.engines.attempt import AttemptContext
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptLimits
from bridge.engines.one_process import ProcessAttempt
from bridge.process.spawn import ChildProcess
from tests.support.env import fake_pi_command
from tests.support.leaks import run_processes_alive

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_cancel_during_spawn_never_feeds_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = CancelToken()
    real_spawn = provider.spawn

    async def spawn_then_cancel(*args: Any) -> ChildProcess:
        child = await real_spawn(*args)
        token.cancel("cancelled while the agent was starting")
        return child

    monkeypatch.setattr(provider, "spawn", spawn_then_cancel)
    log = tmp_path / "prompts"
    sent: list[Out] = []
    attempt = ProcessAttempt(
        AttemptContext(
            PiAgent(),
            # SIGTERM ignored from exec on (inherited), so the agent lives long enough to read stdin.
            ("sh", "-c", 'trap "" TERM; exec "$0" "$@"', *fake_pi_command()),
            RunOptions(prompt="secret prompt", cwd=str(tmp_path), model="slow_to_stop"),
            sent.extend,
            token,
            AttemptLimits(),
            extra_env={"FAKE_PI_PROMPT_LOG": str(log)},
        )
    )
    outcome = await attempt.run()
    assert outcome.status == "cancelled"
    assert outcome.shutdown is not None and outcome.shutdown.survivors == []
    assert sent[-1].type == "terminal.cancelled"
    assert run_processes_alive(outcome.shutdown.pids) == []
    prompts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert "secret prompt" not in prompts, "the prompt reached an agent being cancelled"
