"""The stand-ins the benchmarks run in place of pi or of the bridge, as command lines.

The stubborn agent of the cancel benchmark is the test fake's `ignore_interrupt` scenario: one copy.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import PYTHON, ROOT

AGENTS = Path(__file__).resolve().parent
FAKE_PI = ROOT / "tests" / "fakes" / "fake_pi.py"


def replay(stream: Path) -> list[str]:
    """A pi that replays the `--mode json` stream in `stream` as fast as a pipe allows."""
    return [PYTHON, str(AGENTS / "replay_agent.py"), str(stream)]


def floor(agent: list[str]) -> list[str]:
    """The least a bridge can do with the stream of `agent` (the throughput floor)."""
    return [PYTHON, str(AGENTS / "floor.py"), *agent]


def pygls_minimal() -> list[str]:
    """A pygls server that only answers `initialize`: the start-up baseline."""
    return [PYTHON, str(AGENTS / "pygls_min.py")]


def stubborn() -> list[str]:
    """A one-shot pi that starts an answer, then ignores SIGINT and SIGTERM (the fake's scenario;
    its `--model` comes first, so the run's own model flag does not pick another)."""
    return [PYTHON, str(FAKE_PI), "--model", "ignore_interrupt"]


def leaves_a_child() -> list[str]:
    """A one-shot pi that starts, leaves a `sleep` child behind and waits (the crowd's agent)."""
    return [PYTHON, str(AGENTS / "leaves_a_child.py")]
