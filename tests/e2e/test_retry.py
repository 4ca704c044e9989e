"""Caller-side retry in the orchestration layer: visible attempts, backoff, classifier, cancel."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.lsp import answer_or_error, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants

FAST = {"maxAttempts": 3, "initialDelayMs": 20, "maxDelayMs": 50}


async def test_flaky_agent_completes_after_visible_retries(fake_bridge: LanguageClient, tmp_path) -> None:
    result = await request(
        fake_bridge, "pi/run", {"prompt": str(tmp_path / "n"), "model": "flaky", "retry": FAST, "runId": "f1"}
    )
    assert result["status"] == "completed" and result["attempts"] == 3
    messages = messages_of(fake_bridge).by_run["f1"]
    assert_stream_invariants(messages)
    retrying = [m for m in messages if m["type"] == "run.retrying"]
    assert [m["content"]["attempt"] for m in retrying] == [2, 3]
    assert all(m["content"]["reason"].startswith("503") for m in retrying)
    terminals = [(m["attempt"], m["type"]) for m in messages if m["type"].startswith("terminal.")]
    assert terminals == [(1, "terminal.failed"), (2, "terminal.failed"), (3, "terminal.completed")]


async def test_retries_stop_at_max_attempts(fake_bridge: LanguageClient, tmp_path) -> None:
    result = await request(
        fake_bridge, "pi/run", {"prompt": str(tmp_path / "n"), "model": "always_500", "retry": FAST}
    )
    assert result["status"] == "failed" and result["attempts"] == 3
    assert (tmp_path / "n").read_text() == "3", "exactly one agent process per attempt"


@pytest.mark.parametrize("model", ["auth_error", "usage_error"])
async def test_non_retryable_failures_are_not_retried(fake_bridge: LanguageClient, model: str) -> None:
    result = await request(fake_bridge, "pi/run", {"prompt": "x", "model": model, "retry": FAST})
    assert result["status"] == "failed" and result["attempts"] == 1


async def test_default_is_one_attempt(fake_bridge: LanguageClient, tmp_path) -> None:
    result = await request(fake_bridge, "pi/run", {"prompt": str(tmp_path / "n"), "model": "always_500"})
    assert result["attempts"] == 1


async def test_cancel_during_backoff_ends_the_run_at_once(fake_bridge: LanguageClient, tmp_path) -> None:
    slow = {"maxAttempts": 5, "initialDelayMs": 60_000, "maxDelayMs": 60_000}
    msg_id, task = start_request(
        fake_bridge,
        "pi/run",
        {"runId": "b1", "prompt": str(tmp_path / "n"), "model": "always_500", "retry": slow},
    )
    await messages_of(fake_bridge).wait_type("b1", "run.retrying")
    runs = await request(fake_bridge, "pi/runs", None)
    assert [(r["runId"], r["state"], r["attempt"]) for r in runs["runs"]] == [("b1", "backoff", 2)]
    fake_bridge.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    _, error = await answer_or_error(task, timeout=5)
    assert error is not None and error.code == -32800
    assert error.data["attempts"] == 2
    messages = messages_of(fake_bridge).by_run["b1"]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled" and messages[-1]["attempt"] == 2


@requires_pi
@pytest.mark.realpi
async def test_real_pi_flaky_model_completes_on_the_third_attempt(
    real_bridge: LanguageClient, scripted_model: ScriptedModelServer
) -> None:
    scripted_model.reset()
    result = await request(
        real_bridge,
        "pi/run",
        {"prompt": "hi", "provider": "fake", "model": "flaky", "retry": FAST, "runId": "rf"},
    )
    assert result["status"] == "completed" and result["attempts"] == 3
    messages = messages_of(real_bridge).by_run["rf"]
    assert_stream_invariants(messages)
    assert [m["type"] for m in messages].count("run.retrying") == 2
    assert len([r for r in scripted_model.requests if r["model"] == "flaky"]) == 3, "no hidden attempt"
