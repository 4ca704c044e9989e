"""Runs built in-process, for tests of the run layer without a bridge or an agent."""

from __future__ import annotations

from typing import Any

from bridge.agents.values import RunOptions
from bridge.contract import RunParams
from bridge.runs.run import Run


def make_run(run_id: str, cwd: str, *, session_id: str | None = None) -> tuple[Run, list[dict[str, Any]]]:
    """A run, and the list its messages are sent to."""
    sent: list[dict[str, Any]] = []
    run = Run(
        run_id=run_id,
        params=RunParams(prompt="go"),
        options=RunOptions(prompt="go", cwd=cwd),
        sink=sent.extend,
    )
    run.session_id = session_id
    return run, sent
