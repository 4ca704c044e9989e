"""Server-wide settings from initializationOptions, the concurrency limit, and run options -> flags."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.agents.pi.command import pi_flags
from bridge.agents.values import RunOptions
from tests.support.env import fake_pi_command
from tests.support.raw import RawBridge


@pytest.fixture
def one_slot() -> Iterator[RawBridge]:
    raw = RawBridge()
    raw.initialize({"piCommand": fake_pi_command(), "maxConcurrentRuns": 1, "warmPool": False})
    yield raw
    raw.close()


def test_initialization_options_round_trip_and_drive_retry(tmp_path) -> None:
    raw = RawBridge()
    try:
        retry = {"maxAttempts": 2, "initialDelayMs": 10, "maxDelayMs": 20}
        answer = raw.initialize({"piCommand": fake_pi_command(), "retry": retry, "maxConcurrentRuns": "many"})
        settings = answer["result"]["capabilities"]["experimental"]["piBridge"]["settings"]
        assert settings["retry"] == retry
        assert settings["maxConcurrentRuns"] == 8, "a bad option falls back to its default"
        warning = raw.wait_for(lambda m: m.get("method") == "window/logMessage")
        assert "maxConcurrentRuns" in warning["params"]["message"]
        msg_id = raw.request("pi/run", {"prompt": str(tmp_path / "n"), "model": "always_500"})
        assert raw.response(msg_id)["result"]["attempts"] == 2, "the server default applies to runs"
    finally:
        raw.close()


def test_runs_beyond_the_limit_wait_in_line_and_are_told(one_slot: RawBridge) -> None:
    first = one_slot.request("pi/run", {"runId": "first", "prompt": "x", "model": "slow"})
    one_slot.message("first", "assistant")
    second = one_slot.request("pi/run", {"runId": "second", "prompt": "x", "model": "text"})
    queued = one_slot.message("second", "run.queued")
    assert queued["content"] == {"position": 1, "limit": 1}
    runs = one_slot.request("pi/runs", None)
    listed = {r["runId"]: r for r in one_slot.response(runs)["result"]["runs"]}
    assert {k: r["state"] for k, r in listed.items()} == {"first": "running", "second": "queued"}
    assert listed["first"]["pid"] > 0 and "pid" not in listed["second"], "a live run shows its agent's pid"
    one_slot.request("pi/cancel", {"runId": "first"})
    assert one_slot.response(first)["error"]["code"] == -32800
    assert one_slot.response(second)["result"]["status"] == "completed"


def test_fail_fast_when_queueing_is_off() -> None:
    raw = RawBridge()
    try:
        raw.initialize({"piCommand": fake_pi_command(), "maxConcurrentRuns": 1, "queueWhenBusy": False})
        first = raw.request("pi/run", {"runId": "a", "prompt": "x", "model": "slow"})
        raw.message("a", "assistant")
        second = raw.request("pi/run", {"runId": "b", "prompt": "x", "model": "text"})
        result = raw.response(second)["result"]
        assert result["status"] == "failed" and result["error"]["kind"] == "busy"
        assert raw.message("b", "terminal.failed")["seq"] == 1
        raw.request("pi/cancel", {"runId": "a"})
        assert raw.response(first)["error"]["code"] == -32800
    finally:
        raw.close()


def test_each_option_maps_to_pi_flags_in_one_place() -> None:
    base = RunOptions(prompt="--not-a-flag @not-a-file", cwd="/")
    assert pi_flags(base) == ["--mode", "json"], "the prompt never reaches argv"
    full = RunOptions(
        prompt="x",
        cwd="/",
        provider="anthropic",
        model="m",
        thinking="high",
        tools=("read", "bash"),
        session_id="s1",
    )
    assert pi_flags(full) == [
        "--mode", "json", "--provider", "anthropic", "--model", "m", "--thinking", "high",
        "--tools", "read,bash", "--session", "s1",
    ]  # fmt: skip
    assert pi_flags(RunOptions(prompt="x", cwd="/", tools=())) == ["--mode", "json", "--no-tools"]
    assert pi_flags(RunOptions(prompt="x", cwd="/", continue_session=True))[-1] == "--continue"


def test_the_provider_has_no_retry_option() -> None:
    from bridge.engines.attempt import AttemptContext
    from bridge.engines.endings import AttemptLimits
    from bridge.engines.one_process import ProcessAttempt

    assert "retry" not in RunOptions.__dataclass_fields__
    assert "retry" not in AttemptLimits.__dataclass_fields__
    assert "retry" not in ProcessAttempt.__init__.__code__.co_varnames
    assert "retry" not in AttemptContext.__dataclass_fields__
