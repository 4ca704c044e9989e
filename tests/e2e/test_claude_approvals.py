"""Approvals on a live Claude Code: its `can_use_tool` requests go through the bridge's gate.

The client declares `capabilities.experimental.piBridge.permissions`, so its conversations start
in `ask`: each Write Claude Code asks about comes to it as `pi/requestPermission`, and its answer
is Claude Code's `control_response`. In `plan` the bridge switches Claude Code to its own plan mode
and refuses the edit it still asks about.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.approvals import ALLOW_ALWAYS, ALLOW_ONCE, REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.scenarios import WRITE_CONTENT, WRITE_FILE
from tests.support.env import BRIDGE, CLAUDE_BIN, ROOT, requires_claude
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, contents_of, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_claude, pytest.mark.realpi]

_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-claude-approvals-"))
Answer = Callable[[dict[str, Any]], Awaitable[Any]]


class Asked:
    """Every pi/requestPermission the client got, and how it answers the next."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.option = REJECT_ONCE
        self.message: str | None = None
        self.questions: list[dict[str, Any]] = []


ASKED = Asked()


def _client() -> LanguageClient:
    client = make_client()

    @client.feature("pi/requestPermission")
    async def on_request(ls: LanguageClient, params: Any) -> Any:
        ASKED.requests.append(params)
        return {"optionId": ASKED.option, **({"message": ASKED.message} if ASKED.message else {})}

    @client.feature("pi/ask")
    async def on_ask(ls: LanguageClient, params: Any) -> Any:
        ASKED.questions.append(params)
        return {"value": "blue"}

    return client


CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "claude"],
    client_factory=_client,
    extra_env={
        "PATH": os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")]),
        STATE_DIR_ENV: str(_STATE),
    },
)


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    ASKED.__init__()  # type: ignore[misc]
    env = {
        "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(tmp_path_factory.mktemp("claude-config")),
    }
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                experimental={"piBridge": {"permissions": True, "questions": True}}
            ),
            initialization_options={"env": env, "warmPool": False},
            root_uri=ROOT.as_uri(),
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def write_run(client: LanguageClient, cwd: Path, **params: Any) -> tuple[dict[str, Any], list[Any]]:
    result = await request(
        client, "pi/run", {"prompt": "write it", "model": "write", "cwd": str(cwd), **params}
    )
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


def _one_decision(messages: list[Any]) -> dict[str, Any]:
    resolved = contents_of(messages, "permission.resolved")
    assert len(resolved) == 1, resolved
    return dict(resolved[0])


async def test_a_rejected_write_never_runs_and_the_model_is_told(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    ASKED.option, ASKED.message = REJECT_ONCE, "not in my repo, thanks"
    result, messages = await write_run(bridge, tmp_path)
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    assert asked["tool"] == "Write" and asked["kind"] == "edit"
    assert asked["diff"]["newText"] == WRITE_CONTENT and "oldText" not in asked["diff"]
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"], decision["optionId"]) == ("reject", "user", REJECT_ONCE)
    (failed,) = contents_of(messages, "tool.failed")
    assert failed["reason"] == "denied" and "not in my repo, thanks" in failed["error"], failed
    assert "not in my repo, thanks" in result["text"], "the model was given the reason"
    assert not (tmp_path / WRITE_FILE).exists(), "the write never ran"


async def test_an_approved_write_runs(bridge: LanguageClient, tmp_path: Path) -> None:
    ASKED.option = ALLOW_ONCE
    result, messages = await write_run(bridge, tmp_path)
    assert result["status"] == "completed", result
    assert len(ASKED.requests) == 1
    assert _one_decision(messages)["decision"] == "allow"
    assert contents_of(messages, "tool.completed"), "the write ran"
    assert (tmp_path / WRITE_FILE).read_text() == WRITE_CONTENT


async def test_allow_always_answers_the_next_write_by_rule(bridge: LanguageClient, tmp_path: Path) -> None:
    ASKED.option = ALLOW_ALWAYS
    first, _ = await write_run(bridge, tmp_path)
    assert first["status"] == "completed", first
    assert (tmp_path / WRITE_FILE).read_text() == WRITE_CONTENT
    rules = (await request(bridge, "pi/permissions", {"cwd": str(tmp_path)}))["rules"]
    assert len(rules) == 1, "the rule is kept for the workspace"
    (tmp_path / WRITE_FILE).unlink()
    ASKED.option = REJECT_ONCE
    second, messages = await write_run(bridge, tmp_path, sessionId=first["sessionId"])
    assert second["status"] == "completed", second
    assert len(ASKED.requests) == 1, "the same write was not put to the user again"
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"]) == ("allow", "rule"), decision
    assert (tmp_path / WRITE_FILE).read_text() == WRITE_CONTENT


async def test_plan_mode_refuses_the_edit_without_asking(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    ASKED.option = ALLOW_ONCE
    result, messages = await write_run(bridge, tmp_path, mode="plan")
    last_request = [r for r in scripted_model.requests if r["model"] == "write"][-1]
    assert "plan mode is active" in str(last_request["body"]).lower(), "Claude Code was in its plan mode"
    assert result["status"] == "completed", result
    assert ASKED.requests == [], "plan refuses: nothing is put to the user"
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"]) == ("reject", "mode"), decision
    (failed,) = contents_of(messages, "tool.failed")
    assert failed["reason"] == "denied"
    assert not (tmp_path / WRITE_FILE).exists(), "plan mode changed nothing"


@pytest.mark.parametrize("option", [ALLOW_ONCE, REJECT_ONCE])
async def test_a_command_that_changes_files_is_asked_about_and_runs_only_when_approved(
    bridge: LanguageClient, tmp_path: Path, option: str
) -> None:
    ASKED.option = option
    result, messages = await request_run(bridge, tmp_path, "toolcompound")
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    assert asked["tool"] == "Bash" and asked["kind"] == "execute"
    assert _one_decision(messages)["decision"] == ("allow" if option == ALLOW_ONCE else "reject")
    assert (tmp_path / "compound.txt").exists() is (option == ALLOW_ONCE)


async def request_run(client: LanguageClient, cwd: Path, model: str) -> tuple[dict[str, Any], list[Any]]:
    result = await request(client, "pi/run", {"prompt": "go", "model": model, "cwd": str(cwd)})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def test_ask_user_question_is_a_select_put_to_the_user_and_the_model_gets_the_choice(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    result, _ = await request_run(bridge, tmp_path, "askuser")
    assert result["status"] == "completed", result
    (question,) = ASKED.questions
    assert question["kind"] == "select" and question["title"] == "Which colour?"
    assert question["options"] == ["red", "blue"]
    assert ASKED.requests == [], "a question, not a permission"
    assert "blue" in result["text"], "the model was given the user's choice"


# A web call names what leaves the machine: an address with data in it, a query.
WEB_CALLS = {
    "WebFetch": {"url": "http://127.0.0.1:9/leak?key=planted-secret", "prompt": "summarize"},
    "WebSearch": {"query": "planted-secret"},
}


async def _web_run(client: LanguageClient, cwd: Path, tool: str, mode: str) -> list[Any]:
    prompt = f"{tool} {json.dumps(WEB_CALLS[tool])}"
    result = await request(
        client, "pi/run", {"prompt": prompt, "model": "calltool", "cwd": str(cwd), "mode": mode}
    )
    assert result["status"] == "completed", result
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return messages


@pytest.mark.parametrize("tool", list(WEB_CALLS))
@pytest.mark.parametrize("mode", ["ask", "auto-edit"])
async def test_a_web_tool_is_asked_about_in_ask_and_auto_edit(
    bridge: LanguageClient, tmp_path: Path, tool: str, mode: str
) -> None:
    """WebFetch and WebSearch send data out: they are not read-only (issue 34, item 14)."""
    ASKED.option = REJECT_ONCE
    messages = await _web_run(bridge, tmp_path, tool, mode)
    (asked,) = ASKED.requests
    assert asked["tool"] == tool and asked["kind"] == "other", asked
    assert asked["input"] == WEB_CALLS[tool], "the user sees what would leave the machine"
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"]) == ("reject", "user"), decision


@pytest.mark.parametrize("tool", list(WEB_CALLS))
async def test_a_web_tool_is_refused_in_plan_without_asking(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, tool: str
) -> None:
    ASKED.option = ALLOW_ONCE
    messages = await _web_run(bridge, tmp_path, tool, "plan")
    assert ASKED.requests == [], "plan refuses: nothing is put to the user"
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"]) == ("reject", "mode"), decision
    last = [r for r in scripted_model.requests if r["model"] == "calltool"][-1]
    assert "plan mode: read-only" in json.dumps(last["body"]), "the model was told it was refused"
