"""An agent's own dialogs reach the user, and never leave a run waiting: real pi 1.6.0 with a user
extension that asks.

The extension in pi's agent dir asks before every bash call (a confirm, as pi's permission-gate
example does; or a select, an input, a confirm with its own timeout, as `DIALOG_KIND` says).
Under `--mode rpc` that becomes an `extension_ui_request`, which blocks the extension until
something answers. A client that declared `questions` gets `pi/ask` and its answer is obeyed; one
with `window/showMessageRequest` gets select and confirm that way; one that can answer nothing
has the dialog answered `cancelled` at once. The extension blocks the call unless it was told
yes, so whether bash ran says what the bridge answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import ROOT, WAIT, agent_dir_with_extension
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, initialize, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

CONFIRM_GATE = """
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return undefined;
    const kind = process.env.DIALOG_KIND || "confirm";
    ctx.ui.notify("asking before bash", "info");
    if (kind === "select") {
      const choice = await ctx.ui.select("How to go on?", ["run it", "skip it"]);
      return choice === "run it" ? undefined : { block: true, reason: `chose ${choice}` };
    }
    if (kind === "input") {
      const text = await ctx.ui.input("Why run it?", "a reason");
      return text === "because" ? undefined : { block: true, reason: `reason ${text}` };
    }
    const timeout = kind === "timeout" ? { timeout: 300 } : undefined;
    const ok = await ctx.ui.confirm("Run this command?", String(event.input.command), timeout);
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


class User:
    """The client's side: each pi/ask (or message request) it got, what the bridge withdrew, and
    how it answers (None: never)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.withdrawn: list[Any] = []
        self.reply: dict[str, Any] | None = {"cancelled": True}
        self.arrived = asyncio.Event()
        self.gone = asyncio.Event()

    async def answer(self, params: dict[str, Any]) -> Any:
        self.asked.append(params)
        self.arrived.set()
        if self.reply is None:
            await asyncio.Event().wait()  # never answers; the bridge's withdrawal cancels this
        return self.reply


USER = User()


def _user_client() -> LanguageClient:
    client = make_client()

    @client.feature("pi/ask")
    async def on_ask(ls: LanguageClient, params: Any) -> Any:
        return await USER.answer(params)

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    async def on_message_request(ls: LanguageClient, params: Any) -> Any:
        return await USER.answer(params)

    cancel_notification = client.protocol._handle_cancel_notification

    def on_cancel(msg_id: Any) -> None:  # pygls's own $/cancelRequest handling, observed
        USER.withdrawn.append(msg_id)
        USER.gone.set()
        cancel_notification(msg_id)

    client.protocol._handle_cancel_notification = on_cancel  # type: ignore[method-assign]
    return client


QUESTIONS = types.ClientCapabilities(experimental={"piBridge": {"questions": True}})
MESSAGE_REQUESTS = types.ClientCapabilities(
    window=types.WindowClientCapabilities(
        show_message=types.ShowMessageRequestClientCapabilities(
            message_action_item=types.ClientShowMessageActionItemOptions(additional_properties_support=False)
        )
    )
)


@pytest_lsp.fixture(config=bridge_config(client_factory=_user_client))
async def user_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """A bridge whose client answers as USER says; each test initializes it (its dialog kind)."""
    USER.__init__()  # type: ignore[misc]
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _start(
    client: LanguageClient, agent_dir: Path, capabilities: types.ClientCapabilities, kind: str = "confirm"
) -> None:
    env = {"PI_CODING_AGENT_DIR": str(agent_dir), "DIALOG_KIND": kind}
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            # `full`: the bridge's own approvals stay out of the way of the extension's dialog
            initialization_options={"env": env, "warmPool": False, "defaultMode": "full"},
            root_uri=ROOT.as_uri(),
        )
    )


async def _bash_turn(client: LanguageClient, cwd: Path, **params: Any) -> tuple[dict[str, Any], list[Any]]:
    """One run whose model calls bash once; its answer and its stream (checked)."""
    run = {"prompt": "go", "provider": "fake", "model": "tool", "cwd": str(cwd), **params}
    result = await request(client, "pi/run", run)
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


def _ran(messages: list[Any]) -> bool:
    """Whether the run's bash ran (it completed), or was blocked (it failed): exactly one."""
    ended = [m for m in messages if m["type"] in ("tool.completed", "tool.failed")]
    assert len(ended) == 1, ended
    return bool(ended[0]["type"] == "tool.completed")


async def test_a_confirm_goes_to_pi_ask_and_is_obeyed(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, QUESTIONS)
    USER.reply = {"confirmed": True}
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert result["status"] == "completed" and _ran(messages), messages
    asked = USER.asked[0]
    assert asked["kind"] == "confirm" and asked["title"] == "Run this command?", asked
    assert asked["message"] == "echo hi" and asked["runId"] == result["runId"], asked
    assert not [m for m in messages if m["type"] == "notice" and m["content"]["level"] == "warning"]
    told = [(shown.type, shown.message) for shown in user_bridge.messages]  # window/showMessage
    assert (types.MessageType.Info, "asking before bash") in told, told

    USER.reply = {"confirmed": False}
    result, messages = await _bash_turn(user_bridge, tmp_path, sessionId=result["sessionId"])
    assert result["status"] == "completed" and not _ran(messages), messages
    failed = next(m["content"] for m in messages if m["type"] == "tool.failed")
    assert "not confirmed by the user" in failed["error"], failed


async def test_a_select_answer_must_be_one_of_its_options(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, QUESTIONS, kind="select")
    USER.reply = {"value": "rm -rf /"}  # not an option: no answer
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert result["status"] == "completed" and not _ran(messages), messages
    assert USER.asked[0]["options"] == ["run it", "skip it"], USER.asked
    failed = next(m["content"] for m in messages if m["type"] == "tool.failed")
    assert "chose undefined" in failed["error"], failed

    USER.reply = {"value": "run it"}
    result, messages = await _bash_turn(user_bridge, tmp_path, sessionId=result["sessionId"])
    assert _ran(messages), messages


async def test_an_input_dialog_gets_the_user_s_text(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, QUESTIONS, kind="input")
    USER.reply = {"value": "because"}
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert _ran(messages), messages
    assert USER.asked[0]["kind"] == "input" and USER.asked[0]["placeholder"] == "a reason", USER.asked


async def test_a_dialog_s_own_timeout_ends_the_wait_and_withdraws_the_question(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, QUESTIONS, kind="timeout")
    USER.reply = None  # the user never answers
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert result["status"] == "completed" and not _ran(messages), messages
    assert USER.asked[0]["timeoutMs"] == 300, USER.asked
    await asyncio.wait_for(USER.gone.wait(), WAIT)  # withdrawn with $/cancelRequest


async def test_a_cancel_while_asking_withdraws_the_question_and_the_conversation_goes_on(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, QUESTIONS)
    USER.reply = None
    run = {"runId": "asking", "prompt": "go", "provider": "fake", "model": "tool", "cwd": str(tmp_path)}
    pending = asyncio.ensure_future(request(user_bridge, "pi/run", run))
    await asyncio.wait_for(USER.arrived.wait(), WAIT)
    await request(user_bridge, "pi/cancel", {"runId": "asking"})
    with pytest.raises(JsonRpcException, match=r"(?i)cancel"):  # the run's answer: cancelled
        await asyncio.wait_for(pending, WAIT)
    await asyncio.wait_for(USER.gone.wait(), WAIT)
    messages = messages_of(user_bridge).by_run["asking"]
    assert_stream_invariants(messages)
    assert not [m for m in messages if m["type"] == "tool.completed"], "nothing ran"
    session_id = next(m["content"]["sessionId"] for m in messages if m["type"] == "session.started")
    USER.reply = {"confirmed": True}
    result, messages = await _bash_turn(user_bridge, tmp_path, sessionId=session_id)
    assert result["status"] == "completed" and _ran(messages), messages


async def test_a_client_with_message_requests_confirms_there(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, MESSAGE_REQUESTS)
    USER.reply = {"title": "Yes"}
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert _ran(messages), messages
    shown = USER.asked[0]
    assert [action.title for action in shown.actions] == ["Yes", "No"], shown  # typed by pygls
    assert "Run this command?" in shown.message, shown


async def test_an_input_a_message_request_cannot_carry_is_cancelled_at_once_with_a_notice(
    user_bridge: LanguageClient, gated_agent_dir: Path, tmp_path: Path
) -> None:
    await _start(user_bridge, gated_agent_dir, MESSAGE_REQUESTS, kind="input")
    result, messages = await _bash_turn(user_bridge, tmp_path)
    assert result["status"] == "completed" and not _ran(messages), messages
    assert not USER.asked, "nothing was put to the user"
    notices = [m["content"] for m in messages if m["type"] == "notice" and m["content"]["level"] == "warning"]
    assert notices and "Why run it?" in notices[0]["text"], notices
