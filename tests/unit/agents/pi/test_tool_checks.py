"""The gate's pieces without pi: reading the extension's question, answering it once, the mode files."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import orjson

from bridge.agents.pi.live import PiRpc
from bridge.agents.pi.tool_checks import MARKER, answer_line, tool_check
from bridge.agents.values import ToolCheck, ToolVerdict
from bridge.contract import PermissionRule
from bridge.policy.gate import Gate
from bridge.policy.permissions import CANNOT_ASK_REASON, PLAN_REASON
from bridge.process.spawn import ChildProcess
from tests.support.runs import make_run


def _question(request_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    payload = {"toolCallId": f"call-{request_id}", "toolName": tool, "input": arguments}
    return {
        "type": "extension_ui_request",
        "id": request_id,
        "method": "input",
        "title": MARKER,
        "placeholder": orjson.dumps(payload).decode(),
    }


def test_a_question_names_the_kind_and_the_command_or_path() -> None:
    bash = tool_check(_question("1", "bash", {"command": "echo hi"}))
    assert bash is not None and (bash.kind, bash.command, bash.path) == ("execute", "echo hi", None)
    edit = tool_check(_question("2", "edit", {"path": "a.txt", "edits": []}))
    assert edit is not None and (edit.kind, edit.path, edit.command) == ("edit", "a.txt", None)
    read = tool_check(_question("3", "read", {"path": "a.txt"}))
    assert read is not None and read.kind == "read"
    other = tool_check(_question("4", "web", {"command": "x"}))
    assert other is not None and other.kind == "other" and other.command is None
    assert tool_check({"placeholder": "not json"}) is None


def test_the_answer_is_the_dialogs_value_as_json() -> None:
    reply = orjson.loads(answer_line("r1", ToolVerdict(allow=False, reason="no")))
    assert reply["type"] == "extension_ui_response" and reply["id"] == "r1"
    assert orjson.loads(reply["value"]) == {"decision": "deny", "reason": "no"}


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write_now(self, data: bytes) -> None:
        self.lines.extend(orjson.loads(line) for line in data.splitlines())


def _client() -> tuple[PiRpc, _Stdin]:
    stdin = _Stdin()
    return PiRpc(cast(ChildProcess, SimpleNamespace(stdin=stdin))), stdin


def test_with_no_attempt_listening_the_question_is_denied_and_is_no_event() -> None:
    rpc, stdin = _client()
    heard: list[list[bytes]] = []
    rpc.listener = heard.append
    rpc._dispatch([orjson.dumps(_question("q1", "bash", {"command": "echo hi"}))])
    assert not heard, "the gate's question is not a run event"
    assert len(stdin.lines) == 1 and orjson.loads(stdin.lines[0]["value"])["decision"] == "deny"


async def test_the_check_decides_and_the_question_is_answered_once() -> None:
    rpc, stdin = _client()
    asked: list[ToolCheck] = []
    release = anyio.Event()

    async def asks(check: ToolCheck) -> ToolVerdict:
        asked.append(check)
        await release.wait()
        return ToolVerdict(allow=True)

    rpc.asks = asks
    line = orjson.dumps(_question("q2", "bash", {"command": "echo hi"}))
    async with anyio.create_task_group() as tasks:
        rpc._tasks = tasks
        rpc._dispatch([line])
        rpc._dispatch([line])  # the same question again is not asked twice
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert [check.tool_call_id for check in asked] == ["call-q2"]
    assert len(stdin.lines) == 1 and orjson.loads(stdin.lines[0]["value"]) == {"decision": "allow"}
    rpc._settle_check("q2", ToolVerdict(allow=False))
    assert len(stdin.lines) == 1, "a late answer is ignored"


async def test_modes_decide_and_every_bound_conversation_has_a_file(tmp_path: Path) -> None:
    """`full` is written too: the agent reads a missing file as `ask` (issue 34 item 13; a
    missing file once meant `full`, so deleting it turned asking off)."""
    gate = Gate("full", root=tmp_path)
    board = gate.board.path
    call = ToolCheck(tool_call_id="c", tool="bash", kind="execute", input={}, command="echo hi")
    run, _ = make_run("r1", str(tmp_path), session_id="s1")
    check = gate.check(run)
    gate.bind("s1", None)
    assert (board / "s1").read_text() == "full", "full: the agent reads it and asks nothing"
    assert (await check(call)).allow
    gate.bind("s1", "plan")
    assert (board / "s1").read_text() == "plan"
    assert await check(call) == ToolVerdict(allow=False, reason=PLAN_REASON)
    gate.set_mode("s1", "ask")
    assert await check(call) == ToolVerdict(allow=False, reason=CANNOT_ASK_REASON)
    gate.set_mode("s1", "full")
    assert (board / "s1").read_text() == "full"
    (board / "s1").unlink()
    board.rmdir()  # deleted by a command: the next publish puts it back
    gate.set_mode("s1", "ask")
    assert (board / "s1").read_text() == "ask"
    gate.set_mode("../evil", "plan")
    assert not (tmp_path / "evil").exists() and not list(board.glob("*evil*"))
    gate.close()
    assert not board.exists()


async def test_a_full_conversation_under_a_deny_rule_still_asks_the_gate(tmp_path: Path) -> None:
    """pi's gate skips the bridge in `full`; a deny rule holds in every mode, so a conversation
    whose workspace has one shows `hold` to the agent (it asks), and the gate refuses by rule."""
    gate = Gate("full", root=tmp_path)
    board = gate.board.path
    deny = PermissionRule.model_validate(
        {
            "id": "no-rm",
            "tool": "*",
            "match": {"commandPrefix": ["rm"]},
            "decision": "deny",
            "scope": "workspace",
        }
    )
    gate.bind("plain", None, cwd=str(tmp_path))
    assert (board / "plain").read_text() == "full", "no deny rule: full keeps its fast path"
    gate.rules.add(str(tmp_path), deny)
    gate.bind("s1", None, cwd=str(tmp_path))
    assert (board / "s1").read_text() == "hold"
    gate.unhold("s1")
    gate.set_mode("s1", "full")
    assert (board / "s1").read_text() == "hold", "still asked after the checkpoint and a mode change"
    run, _ = make_run("r1", str(tmp_path), session_id="s1")
    call = ToolCheck(tool_call_id="c", tool="bash", kind="execute", input={}, command="/bin/rm -rf x")
    verdict = await gate.check(run)(call)
    assert not verdict.allow and "no-rm" in (verdict.reason or "")
    echo = ToolCheck(tool_call_id="d", tool="bash", kind="execute", input={}, command="echo hi")
    assert (await gate.check(run)(echo)).allow
    gate.close()
