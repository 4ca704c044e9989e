"""The gate on real pi 1.6.0 with the scripted model: each conversation's mode decides its tool calls.

The bridge's extension (bridge/agents/pi/extension/index.ts) asks the bridge before each tool
unless the conversation is in `full` mode. No client here can answer, so a call that would ask is
refused with the contract's reason; `plan` refuses an edit by itself; `pi/setMode` holds from the
next tool call; and a conversation nobody set a mode for runs as before, with no mode file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient

from bridge.policy.permissions import CANNOT_ASK_REASON, PLAN_REASON
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model.scenarios import EDIT_FILE, EDIT_ORIGINAL
from tests.conftest import requires_pi
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, initialize, request, scripted_run

pytestmark = [requires_pi, pytest.mark.realpi]

# The bridges of this module keep their state (the mode files) here, never in the user's.
_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-gate-state-"))


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)


async def _bridge(lsp_client: LanguageClient, pi_agent_dir: Path, **options: Any) -> LanguageClient:
    await initialize(
        lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False, **options}
    )
    return lsp_client


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}))
async def bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _bridge(lsp_client, pi_agent_dir)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}))
async def asking_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _bridge(lsp_client, pi_agent_dir, defaultMode="ask")
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_plan_mode_refuses_an_edit_by_itself(bridge: LanguageClient, tmp_path: Path) -> None:
    (tmp_path / EDIT_FILE).write_text(EDIT_ORIGINAL)
    result, messages = await scripted_run(bridge, tmp_path, "edit", mode="plan")
    assert result["status"] == "completed", result
    failed = contents_of(messages, "tool.failed")
    assert len(failed) == 1 and PLAN_REASON in failed[0]["error"], failed
    assert not contents_of(messages, "tool.completed")
    assert (tmp_path / EDIT_FILE).read_text() == EDIT_ORIGINAL, "the edit never ran"


async def test_ask_with_a_client_that_cannot_answer_refuses_the_command(
    asking_bridge: LanguageClient, tmp_path: Path
) -> None:
    result, messages = await scripted_run(asking_bridge, tmp_path, "tool")
    assert result["status"] == "completed", result
    failed = contents_of(messages, "tool.failed")
    assert len(failed) == 1 and CANNOT_ASK_REASON in failed[0]["error"], failed
    assert not contents_of(messages, "tool.completed"), "echo never ran"


async def test_set_mode_takes_effect_at_the_next_tool_call(bridge: LanguageClient, tmp_path: Path) -> None:
    first, messages = await scripted_run(bridge, tmp_path, "tool")
    assert first["status"] == "completed" and contents_of(messages, "tool.completed"), "full mode: it ran"
    session = first["sessionId"]
    answer = await request(bridge, "pi/setMode", {"sessionId": session, "mode": "plan"})
    assert answer == {"sessionId": session, "mode": "plan"}
    second, messages = await scripted_run(bridge, tmp_path, "tool", sessionId=session)
    assert second["status"] == "completed", second
    failed = contents_of(messages, "tool.failed")
    assert len(failed) == 1 and PLAN_REASON in failed[0]["error"], failed
    await request(bridge, "pi/setMode", {"sessionId": session, "mode": "full"})
    third, messages = await scripted_run(bridge, tmp_path, "tool", sessionId=session)
    assert third["status"] == "completed" and contents_of(messages, "tool.completed"), "full again: it ran"


async def test_an_unknown_mode_is_invalid_params(bridge: LanguageClient) -> None:
    with pytest.raises(JsonRpcInvalidParams):
        await request(bridge, "pi/setMode", {"sessionId": "s", "mode": "yolo"})


async def test_full_mode_writes_full_to_its_mode_file_and_runs_as_before(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    """A `full` conversation's file says `full` (no round trip): a missing one would mean `ask`."""
    result, messages = await scripted_run(bridge, tmp_path, "tool")
    assert result["status"] == "completed" and contents_of(messages, "tool.completed")
    assert not contents_of(messages, "permission.requested")
    (mode_file,) = (_STATE / "modes").glob(f"*/{result['sessionId']}")
    assert mode_file.read_text() == "full"
