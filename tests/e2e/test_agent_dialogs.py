"""An agent's own dialogs never leave a run waiting: real pi 1.6.0 with a user extension that asks.

The extension in pi's agent dir calls `ctx.ui.confirm` before every bash call, as pi's
permission-gate example does. Under `--mode rpc` that becomes an `extension_ui_request`, which
blocks the extension until something answers. No client here can answer, so the bridge answers
`cancelled` at once: the extension blocks the call, the model is told, and the run completes.
Before, the request was logged as an unknown event and the run hung until it was cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import agent_dir_with_extension
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, initialize, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

CONFIRM_GATE = """
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return undefined;
    ctx.ui.notify("asking before bash", "info");
    const ok = await ctx.ui.confirm("Run this command?", String(event.input.command));
    if (!ok) return { block: true, reason: "not confirmed by the user" };
    return undefined;
  });
}
"""


@pytest.fixture
def gated_agent_dir(pi_agent_dir: Path, tmp_path: Path) -> Path:
    """The scripted model's agent dir, plus a global extension that confirms before bash."""
    return agent_dir_with_extension(pi_agent_dir, tmp_path / "pi-agent", "confirm-gate.ts", CONFIRM_GATE)


@pytest_lsp.fixture(config=bridge_config())
async def bridge(lsp_client: LanguageClient, gated_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(gated_agent_dir)}, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_dialog_no_client_can_answer_is_cancelled_and_the_run_completes(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    result = await request(
        bridge, "pi/run", {"prompt": "go", "provider": "fake", "model": "tool", "cwd": str(tmp_path)}
    )
    assert result["status"] == "completed", result
    messages = messages_of(bridge).by_run[result["runId"]]
    assert_stream_invariants(messages)
    failed = [m["content"] for m in messages if m["type"] == "tool.failed"]
    assert len(failed) == 1 and "not confirmed by the user" in failed[0]["error"], failed
    assert not [m for m in messages if m["type"] == "tool.completed"], "the blocked bash never ran"
    notices = [m["content"] for m in messages if m["type"] == "notice"]
    asked = [n for n in notices if n["level"] == "warning" and "confirm" in n["text"]]
    assert asked and "Run this command?" in asked[0]["text"], notices
    assert {"level": "info", "text": "asking before bash"} in notices, "notify is a notice"


async def test_the_conversation_goes_on_after_a_cancelled_dialog(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    first = await request(
        bridge, "pi/run", {"prompt": "go", "provider": "fake", "model": "tool", "cwd": str(tmp_path)}
    )
    assert first["status"] == "completed"
    params = {"prompt": "again", "provider": "fake", "model": "text", "sessionId": first["sessionId"]}
    second = await request(bridge, "pi/run", {**params, "cwd": str(tmp_path)})
    assert second["status"] == "completed" and second["text"]
