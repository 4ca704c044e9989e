"""bridge/runs/ by job: backoff (attempts.py), the agent of a run (agent_choice.py), seq stamping (run.py),
what a run does after its answer (registry.py).

In-process, no real agent started (one test runs the fake pi): these are the rules each module holds on its own; the e2e tests
drive them through a bridge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bridge import agents
from bridge.agents.values import Out, RunOptions
from bridge.config import BridgeConfig
from bridge.contract import RetryPolicy, RunParams
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.runs import agent_choice
from bridge.runs.agent_choice import AgentChoice, AgentChoiceError
from bridge.runs.attempts import backoff_delay
from bridge.runs.run import Run


def test_backoff_grows_per_attempt_with_jitter_and_stays_under_its_cap() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay_ms=100, max_delay_ms=300)
    for _ in range(200):
        assert 50 <= backoff_delay(policy, 1) <= 100
        assert 100 <= backoff_delay(policy, 2) <= 200
        assert 150 <= backoff_delay(policy, 4) <= 300


def choice() -> AgentChoice:
    return AgentChoice(agents.build_adapter(agents.agent_names()[0]), BridgeConfig())


def test_an_unknown_agent_is_a_choice_error() -> None:
    with pytest.raises(AgentChoiceError):
        choice().choose(RunParams(prompt="x", agent="no-such-agent"), ".")


def test_a_session_stays_with_its_agent() -> None:
    chosen = choice()
    names = chosen.agent_names()
    assert len(names) >= 2, "the bridge knows more than one agent"
    chosen.remember("s1", names[1])
    assert chosen.choose(RunParams(prompt="x", session_id="s1"), ".").name == names[1]
    with pytest.raises(AgentChoiceError, match="belongs to agent"):
        chosen.choose(RunParams(prompt="x", session_id="s1", agent=names[0]), ".")


def test_the_sessions_remembered_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_choice, "MAX_REMEMBERED_SESSIONS", 2)
    chosen = choice()
    name = chosen.agent_names()[1]
    for session in ("a", "b", "a", "c"):  # "a" used again: "b" is the oldest
        chosen.remember(session, name)
    assert list(chosen._session_agents) == ["a", "c"]


def test_every_message_of_every_attempt_gets_the_next_seq() -> None:
    batches: list[list[dict[str, Any]]] = []
    run = Run("r1", RunParams(prompt="x"), RunOptions(prompt="x", cwd="."), batches.append)
    run.emit([Out("assistant", {"delta": "a"}), Out("assistant", {"delta": "b"})])
    run.attempt = 2
    run.emit([Out("run.retrying", {"attempt": 2, "delayMs": 1, "reason": "r"})])
    run.emit([])
    stamped = [(m["attempt"], m["seq"], m["runId"]) for batch in batches for m in batch]
    assert stamped == [(1, 1, "r1"), (1, 2, "r1"), (2, 3, "r1")]
    assert len(batches) == 2, "one batch per emit, none for nothing"


def test_the_models_of_a_first_answer_cancel_and_approval_are_built_before_the_first_prompt() -> None:
    """The contract defers each model's validator to its first use: a bridge's first cancel
    built its answer's on its way to the client, its first approval its request's and answer's.
    A fresh interpreter, as a bridge starts."""
    import subprocess
    import sys

    script = (
        "from bridge import contract\n"
        "from bridge.runs import registry\n"
        "answers = (contract.RunResult, contract.CancelledRunData, contract.CancelResult,\n"
        "    contract.RequestPermissionParams, contract.RequestPermissionAnswer,\n"
        "    contract.PermissionRequestedContent, contract.PermissionResolvedContent)\n"
        "assert not any(m.__pydantic_complete__ for m in answers), 'built at import: nothing to prove'\n"
        "registry._build_hot_validators()\n"
        "print([m.__name__ for m in answers if not m.__pydantic_complete__])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("mode", ["ask", "full"])
def test_what_the_start_built_is_frozen_out_of_the_collectors_full_passes(tmp_path: Path, mode: str) -> None:
    """A full collection walked the whole heap the start built (modules, validators, adapters):
    a pause of tens of milliseconds under whichever prompt it fell on, and after every run's end.
    Once the first prompt is prepared, that heap is frozen. When conversations start in a mode
    that checks commands, the rules' shell parser is in it (its import builds the grammar's
    tables, which fell on the first checked tool call); in `full` it is not built at all (its CPU
    would be every bridge's). A fresh interpreter, as a bridge."""
    import subprocess
    import sys

    script = (
        "import gc, sys, anyio\n"
        "from bridge import agents\n"
        "from bridge.config import BridgeConfig\n"
        "from bridge.runs.registry import RunRegistry\n"
        "registry = RunRegistry(agents.build_adapter('pi'), BridgeConfig(), lambda *a, **k: None)\n"
        f"registry.gate.default_mode = {mode!r}\n"
        "assert gc.get_freeze_count() == 0 and 'bashlex' not in sys.modules\n"
        "anyio.run(registry.prepare_first_prompt)\n"
        "print(gc.get_freeze_count(), 'bashlex.parser' in sys.modules)\n"
    )
    env = {**os.environ, STATE_DIR_ENV: str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    frozen, parser_built = done.stdout.split()
    assert int(frozen) > 10_000, done.stdout
    assert parser_built == str(mode == "ask"), f"the shell parser built in {mode}: {parser_built}"


async def test_a_run_s_answer_goes_out_before_its_checkpoint_is_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot after a run is queued once the run's answer is out, in the same step of the
    loop (so still ahead of any frame the client sends once it has the answer): an answer, a
    cancel's among them, waits for none of the checkpoint's bookkeeping. One process (the fake
    pi), a real workspace and shadow git."""
    import anyio

    from bridge.runs.registry import RunRegistry
    from bridge.runs.request import RunRequest
    from tests.support.env import fake_pi_command

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("before\n")
    config = BridgeConfig(command=tuple(fake_pi_command()), engine="json", warm_pool=False)
    registry = RunRegistry(agents.build_adapter("pi"), config, lambda *args, **kwargs: None)
    checkpoints = registry.checkpoints
    assert checkpoints is not None
    order: list[str] = []
    queue_after = checkpoints.end

    def end(run: Any) -> None:
        order.append("checkpoint queued")
        queue_after(run)

    monkeypatch.setattr(checkpoints, "end", end)
    async with anyio.create_task_group() as tasks:
        await tasks.start(registry.serve)
        run = registry.start(
            RunRequest(prompt="hello", cwd=str(work)), str(work), on_done=lambda _run: order.append("answer")
        )
        with anyio.fail_after(30):
            await run.done.wait()
        assert run.answer is not None and getattr(run.answer, "status", None) == "completed", run.answer
        registry.close()
    assert order == ["answer", "checkpoint queued"]
    assert run.after_answer == [], "done, the bookkeeping lets go of the run (it held the run's prompt)"
