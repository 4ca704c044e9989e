"""Sessions with the real pi: new, resumed by id, continued, after a cancel, and clear failures."""

from __future__ import annotations

import pytest
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import ROOT
from tests.support.leaks import wait_for_run_process
from tests.support.lsp import answer_or_error, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


async def run(client: LanguageClient, **params: object) -> tuple[dict[str, object], list[dict[str, object]]]:
    result = await request(
        client, "pi/run", {"prompt": "Say hello", "provider": "fake", "model": "text", **params}
    )
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def test_new_then_resumed_by_id_is_reported_as_resumed(real_bridge: LanguageClient, tmp_path) -> None:
    first, messages = await run(real_bridge, cwd=str(tmp_path))
    assert messages[0]["type"] == "session.started"
    session_id = first["sessionId"]
    second, messages = await run(real_bridge, cwd=str(tmp_path), sessionId=session_id)
    assert messages[0]["type"] == "session.resumed"
    assert second["sessionId"] == session_id


async def test_continue_latest_of_the_cwd(real_bridge: LanguageClient, tmp_path) -> None:
    first, _ = await run(real_bridge, cwd=str(tmp_path))
    second, messages = await run(real_bridge, cwd=str(tmp_path), continueSession=True)
    assert messages[0]["type"] == "session.resumed"
    assert second["sessionId"] == first["sessionId"]


async def test_a_cancelled_run_s_session_can_be_continued(real_bridge: LanguageClient, tmp_path) -> None:
    run_id = "cancel-then-continue"
    _, task = start_request(
        real_bridge,
        "pi/run",
        {"runId": run_id, "prompt": "go", "provider": "fake", "model": "toolslow", "cwd": str(tmp_path)},
    )
    await messages_of(real_bridge).wait_type(run_id, "tool.update")
    await wait_for_run_process("sleep 30")
    await request(real_bridge, "pi/cancel", {"runId": run_id})
    _, error = await answer_or_error(task)
    session_id = error.data["sessionId"]
    result, messages = await run(real_bridge, cwd=str(tmp_path), sessionId=session_id)
    assert result["status"] == "completed" and messages[0]["type"] == "session.resumed"
    assert result["sessionId"] == session_id


async def test_unknown_session_is_a_clear_failure(real_bridge: LanguageClient, tmp_path) -> None:
    result, _ = await run(real_bridge, cwd=str(tmp_path), sessionId="no-such-session")
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "session" and result["error"]["retryable"] is False
    assert "no-such-session" in result["error"]["message"]


async def test_session_of_another_project_never_waits_on_stdin(real_bridge: LanguageClient, tmp_path) -> None:
    first, _ = await run(real_bridge, cwd=str(tmp_path))
    result, _ = await run(real_bridge, cwd=str(ROOT), sessionId=first["sessionId"])
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "session"
    assert "different project" in result["error"]["message"]
