"""Cancellation: the three-stage shutdown of the whole tree, through $/cancelRequest and pi/cancel."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import fake_pi_command
from tests.support.leaks import assert_no_run_processes, run_processes_alive, wait_for_run_process
from tests.support.lsp import answer_or_error, bridge_config, initialize, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants


def check_cancelled(error: object, run_id: str) -> dict[str, object]:
    assert error is not None, "a cancelled run must answer with an error"
    assert error.code == -32800  # type: ignore[attr-defined]
    data = error.data  # type: ignore[attr-defined]
    assert data["runId"] == run_id and data["status"] == "cancelled"
    receipt = data["shutdown"]
    assert receipt["survivors"] == []
    assert run_processes_alive(receipt["pids"]) == []
    return data


async def cancel_after(
    client: LanguageClient,
    run_id: str,
    kind: str,
    params: dict[str, object],
    how: str,
    process: str | None = None,
):
    msg_id, task = start_request(client, "pi/run", {"runId": run_id, **params})
    await messages_of(client).wait_type(run_id, kind)
    if process is not None:
        await wait_for_run_process(process)
    if how == "cancelRequest":
        client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
        cancel_answer = None
    else:
        cancel_answer = await request(client, "pi/cancel", {"runId": run_id})
    result, error = await answer_or_error(task)
    assert result is None
    data = check_cancelled(error, run_id)
    messages = messages_of(client).by_run[run_id]
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    assert messages[-1]["content"]["text"] == data["text"]
    return data, messages, cancel_answer


@requires_pi
@pytest.mark.realpi
@pytest.mark.parametrize("how", ["cancelRequest", "pi/cancel"])
async def test_real_pi_cancel_mid_stream(real_bridge: LanguageClient, how: str) -> None:
    data, messages, answer = await cancel_after(
        real_bridge,
        f"stream-{how.replace('/', '-')}",
        "assistant",
        {"prompt": "go", "provider": "fake", "model": "slow"},
        how,
    )
    assert data["text"], "text already streamed is kept"
    if answer is not None:
        assert answer["found"] is True and answer["shutdown"]["survivors"] == []


@requires_pi
@pytest.mark.realpi
@pytest.mark.parametrize("how", ["cancelRequest", "pi/cancel"])
async def test_real_pi_cancel_mid_tool_leaves_no_sleep(real_bridge: LanguageClient, how: str) -> None:
    data, messages, _ = await cancel_after(
        real_bridge,
        f"tool-{how.replace('/', '-')}",
        "tool.update",
        {"prompt": "go", "provider": "fake", "model": "toolslow"},
        how,
        "sleep 30",
    )
    failed = [m for m in messages if m["type"] == "tool.failed"]
    assert failed and failed[0]["content"]["cancelled"] is True
    receipt = data["shutdown"]
    # json engine: pi and its tool's sleep; rpc engine: the tool's sleep (pi stays, agentKept)
    assert len(receipt["pids"]) >= (1 if receipt["agentKept"] else 2), "the run's processes were found"
    await assert_no_run_processes(client=real_bridge)


async def test_stubborn_agent_with_daemons_is_killed_with_zero_survivors(fake_bridge: LanguageClient) -> None:
    data, messages, answer = await cancel_after(
        fake_bridge, "stubborn", "tool.update", {"prompt": "x", "model": "stubborn"}, "pi/cancel"
    )
    receipt = data["shutdown"]
    assert receipt["stage"] == "killed"
    assert len(receipt["pids"]) >= 4, f"agent, two children and the daemon: {receipt['pids']}"
    assert 2000 <= receipt["elapsedMs"] < 7500
    await assert_no_run_processes(client=fake_bridge)


async def test_agent_ignoring_the_interrupt_is_killed_after_the_grace(fake_bridge: LanguageClient) -> None:
    data, _, _ = await cancel_after(
        fake_bridge, "deaf", "assistant", {"prompt": "x", "model": "ignore_interrupt"}, "cancelRequest"
    )
    assert data["shutdown"]["stage"] == "killed"
    assert data["text"] == "ignoring signals"


async def test_second_cancel_and_pi_cancel_during_the_shutdown_change_nothing(
    fake_bridge: LanguageClient,
) -> None:
    run_id = "twice"
    msg_id, task = start_request(fake_bridge, "pi/run", {"runId": run_id, "prompt": "x", "model": "stubborn"})
    await messages_of(fake_bridge).wait_type(run_id, "tool.update")
    fake_bridge.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    fake_bridge.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    answer = await request(fake_bridge, "pi/cancel", {"runId": run_id})
    fake_bridge.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    assert answer["found"] is True and answer["shutdown"]["survivors"] == []
    _, error = await answer_or_error(task)
    check_cancelled(error, run_id)
    assert [m["type"] for m in messages_of(fake_bridge).by_run[run_id]].count("terminal.cancelled") == 1


async def test_cancel_of_unknown_run_is_not_found(fake_bridge: LanguageClient) -> None:
    answer = await request(fake_bridge, "pi/cancel", {"runId": "nope"})
    assert answer == {"runId": "nope", "found": False}


async def test_stdout_closed_but_alive_is_stopped_and_says_why(fake_bridge: LanguageClient) -> None:
    result = await request(fake_bridge, "pi/run", {"prompt": "x", "model": "close_stdout"})
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "stalled"
    assert "closed its output" in result["error"]["message"]
    assert result["text"] == "Closing my output now."


@pytest_lsp.fixture(config=bridge_config())
async def json_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """The fake pi on the json engine with no warm pool: a run spawns its one process and nothing
    else (no probe of a live mode the fake pi lacks, no spare starting beside it)."""
    options = {"piCommand": fake_pi_command(), "engine": "json", "warmPool": False}
    await initialize(lsp_client, {**options, "silenceTimeoutMs": 20000})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_deadline_stops_the_run_as_timeout(json_bridge: LanguageClient) -> None:
    # The deadline counts from the request: only the agent's own start may come before its
    # first words (on fake_bridge, a live-mode probe and a spare's start came too, and on a
    # loaded machine took the whole deadline).
    result = await request(json_bridge, "pi/run", {"prompt": "x", "model": "slow", "deadlineMs": 700})
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "timeout"
    assert result["text"].startswith("word0 ")


@requires_pi
@pytest.mark.realpi
async def test_twenty_concurrent_runs_with_random_cancels(real_bridge: LanguageClient) -> None:
    rng = random.Random(20261129)
    models = ["text", "slow", "toolslow", "tool", "thinking"]
    runs = []
    for index in range(20):
        run_id = f"c{index}"
        msg_id, task = start_request(
            real_bridge,
            "pi/run",
            {"runId": run_id, "prompt": "go", "provider": "fake", "model": rng.choice(models)},
        )
        runs.append((run_id, msg_id, task, rng.random() < 0.6))
    for run_id, msg_id, task, cancel in runs:
        if cancel and not task.done():
            await messages_of(real_bridge).wait_type(run_id, "session.started", timeout=60)
            if rng.random() < 0.5:
                real_bridge.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
            else:
                await request(real_bridge, "pi/cancel", {"runId": run_id})
    for run_id, _, task, _ in runs:
        result, error = await answer_or_error(task, timeout=120)
        messages = messages_of(real_bridge).by_run[run_id]
        assert_stream_invariants(messages)
        if error is not None:
            check_cancelled(error, run_id)
        else:
            assert result["status"] == "completed", result
    assert (await request(real_bridge, "pi/runs", None))["runs"] == []
    await assert_no_run_processes(client=real_bridge)


async def test_cancel_while_waiting_for_exit_after_end_of_output_answers_cancelled(
    fake_bridge: LanguageClient,
) -> None:
    """The agent closed its stdout but lives on: the bridge waits a few seconds for it to exit.
    A cancel in that wait is acted on at once, not ignored until the wait ends."""
    run_id = "cancel-after-eof"
    _, task = start_request(fake_bridge, "pi/run", {"runId": run_id, "prompt": "x", "model": "close_stdout"})
    await messages_of(fake_bridge).wait_until(
        lambda: (
            "".join(
                m["content"]["text"]
                for m in messages_of(fake_bridge).by_run[run_id]
                if m["type"] == "assistant"
            )
            == "Closing my output now."
        )
    )
    cancel_answer = await request(fake_bridge, "pi/cancel", {"runId": run_id})
    result, error = await answer_or_error(task)
    assert result is None, f"the run answered {result} instead of cancelled"
    data = check_cancelled(error, run_id)
    assert cancel_answer["shutdown"] == data["shutdown"]
    assert messages_of(fake_bridge).by_run[run_id][-1]["type"] == "terminal.cancelled"


async def test_cancel_after_a_retryable_failure_answers_cancelled_with_a_receipt(
    fake_bridge: LanguageClient,
) -> None:
    """The attempt failed (retryable) and is still being stopped when the cancel arrives: the run
    answers cancelled with the receipt of that stop, and is not retried."""
    run_id = "cancel-after-failure"
    params = {"runId": run_id, "prompt": "x", "model": "fail_then_linger", "retry": {"maxAttempts": 3}}
    _, task = start_request(fake_bridge, "pi/run", params)
    failed = await messages_of(fake_bridge).wait_type(run_id, "terminal.failed")
    assert failed["content"]["error"]["retryable"] is True
    cancel_answer = await request(fake_bridge, "pi/cancel", {"runId": run_id})
    result, error = await answer_or_error(task)
    assert result is None, f"the run answered {result} instead of cancelled"
    data = check_cancelled(error, run_id)
    assert data["attempts"] == 1
    assert data["shutdown"]["pids"], "the receipt lists the stopped agent"
    assert cancel_answer["shutdown"] == data["shutdown"]
    assert all(m["type"] != "run.retrying" for m in messages_of(fake_bridge).by_run[run_id])
