"""Approvals on real pi 1.6.0 with the scripted model, through a pytest-lsp client that answers.

The client declares `capabilities.experimental.piBridge.permissions`, so its conversations start
in `ask` and every edit, write or shell command comes to it as `pi/requestPermission`. Each test
sets how the client answers; the stream must show `permission.requested` and exactly one
`permission.resolved` per such call, and a refused call must not have run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.approvals import ALLOW_ALWAYS, ALLOW_ALWAYS_PREFIX, ALLOW_ONCE, MAX_TITLE, REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model.scenarios import (
    EDIT_FILE,
    EDIT_NEW,
    EDIT_OLD,
    EDIT_ORIGINAL,
    WRITE_CONTENT,
    WRITE_FILE,
)
from tests.conftest import requires_pi
from tests.support.env import ROOT, WAIT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, make_client, messages_of, request, scripted_run
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-approvals-state-"))

Answer = Callable[[dict[str, Any]], Awaitable[Any]]


class Asked:
    """The client's side: every pi/requestPermission it got, its $/cancelRequests, its answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.withdrawn: list[Any] = []
        self.answer: Answer = _answer(REJECT_ONCE)
        self.arrived = asyncio.Event()
        self.cancelled = asyncio.Event()


def _answer(option_id: str, message: str | None = None) -> Answer:
    async def answer(params: dict[str, Any]) -> Any:
        return {"optionId": option_id, **({"message": message} if message else {})}

    return answer


def _client(asked: Asked) -> Callable[[], LanguageClient]:
    def make() -> LanguageClient:
        client = make_client()

        @client.feature("pi/requestPermission")
        async def on_request(ls: LanguageClient, params: Any) -> Any:
            asked.requests.append(params)
            asked.arrived.set()
            try:
                return await asked.answer(params)
            except asyncio.CancelledError:
                asked.cancelled.set()
                return {"optionId": ALLOW_ONCE}  # a late "allow", sent after the withdrawal

        cancel_notification = client.protocol._handle_cancel_notification

        def on_cancel(msg_id: Any) -> None:  # pygls's own $/cancelRequest handling, observed
            asked.withdrawn.append(msg_id)
            cancel_notification(msg_id)

        client.protocol._handle_cancel_notification = on_cancel  # type: ignore[method-assign]
        return client

    return make


ASKED = Asked()


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)


async def _start(
    client: LanguageClient, pi_agent_dir: Path, capabilities: types.ClientCapabilities, **options: Any
) -> LanguageClient:
    ASKED.__init__()  # type: ignore[misc]
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            initialization_options={
                "env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)},
                "warmPool": False,
                **options,
            },
            root_uri=ROOT.as_uri(),
        )
    )
    return client


PERMISSIONS = types.ClientCapabilities(experimental={"piBridge": {"permissions": True}})


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _start(lsp_client, pi_agent_dir, PERMISSIONS)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def watched_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """A bridge that stops an agent silent for SILENCE_S: asking the user must not count."""
    yield await _start(lsp_client, pi_agent_dir, PERMISSIONS, silenceTimeoutMs=int(SILENCE_S * 1000))
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


# Long enough that pi itself, on a loaded 2-core machine, is never this quiet between its lines
# (it was at 0.5 s); the user's think time is a few times longer.
SILENCE_S = 2.0


def _message_client() -> LanguageClient:
    """A client with no pi-bridge capability that answers window/showMessageRequest "Allow"."""
    client = make_client()

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def on_message_request(ls: LanguageClient, params: Any) -> Any:
        ASKED.requests.append(params)
        return {"title": "Allow"}

    return client


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _message_client))
async def message_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    actions = types.ShowMessageRequestClientCapabilities(
        message_action_item=types.ClientShowMessageActionItemOptions(additional_properties_support=False)
    )
    capabilities = types.ClientCapabilities(window=types.WindowClientCapabilities(show_message=actions))
    yield await _start(lsp_client, pi_agent_dir, capabilities)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def _one_decision(messages: list[Any]) -> dict[str, Any]:
    """The one permission.resolved of a run with one tool call (after its request, if any)."""
    resolved = contents_of(messages, "permission.resolved")
    assert len(resolved) == 1, resolved
    return resolved[0]


async def test_ask_then_reject_runs_nothing_and_the_model_is_told(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    ASKED.answer = _answer(REJECT_ONCE, "not in my repo, thanks")
    result, messages = await scripted_run(bridge, tmp_path, "write")
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    assert asked["kind"] == "edit" and asked["tool"] == "write"
    assert asked["diff"] == {"path": WRITE_FILE, "newText": WRITE_CONTENT}, "a new file: no oldText"
    assert [o["kind"] for o in asked["options"]][:1] == ["allow_once"]
    requested = contents_of(messages, "permission.requested")
    assert [r["toolCallId"] for r in requested] == [asked["toolCallId"]]
    decision = _one_decision(messages)
    assert (
        decision["decision"] == "reject" and decision["by"] == "user" and decision["optionId"] == REJECT_ONCE
    )
    (failed,) = contents_of(messages, "tool.failed")
    assert failed["reason"] == "denied" and "not in my repo, thanks" in failed["error"], failed
    assert not (tmp_path / WRITE_FILE).exists(), "the write never ran"


async def test_ask_then_allow_runs_the_command(bridge: LanguageClient, tmp_path: Path) -> None:
    ASKED.answer = _answer(ALLOW_ONCE)
    result, messages = await scripted_run(bridge, tmp_path, "tool")
    assert result["status"] == "completed", result
    assert ASKED.requests[0]["title"] == "echo hi"
    assert _one_decision(messages)["decision"] == "allow"
    (completed,) = contents_of(messages, "tool.completed")
    assert completed["output"].strip() == "hi"


async def test_an_edit_request_shows_the_whole_diff(bridge: LanguageClient, tmp_path: Path) -> None:
    (tmp_path / EDIT_FILE).write_text(EDIT_ORIGINAL)
    ASKED.answer = _answer(ALLOW_ONCE)
    result, messages = await scripted_run(bridge, tmp_path, "edit")
    assert result["status"] == "completed", result
    assert ASKED.requests[0]["diff"] == {
        "path": EDIT_FILE,
        "oldText": EDIT_ORIGINAL,
        "newText": EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW),
    }
    assert (tmp_path / EDIT_FILE).read_text() == EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW)


async def test_allow_always_answers_by_rule_but_never_a_compound_command(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    ASKED.answer = _answer(ALLOW_ALWAYS)
    first, _ = await scripted_run(bridge, tmp_path, "tool")
    assert first["status"] == "completed", first
    (offered,) = [o for o in ASKED.requests[0]["options"] if o["optionId"] == ALLOW_ALWAYS]
    assert offered["rule"]["match"] == {"command": ["echo", "hi"]}, "exact, as its label says"
    rules = (await request(bridge, "pi/permissions", {"cwd": str(tmp_path)}))["rules"]
    assert [r["id"] for r in rules] == [offered["rule"]["id"]], "the rule is kept for the workspace"

    ASKED.answer = _answer(REJECT_ONCE)
    second, messages = await scripted_run(bridge, tmp_path, "tool", sessionId=first["sessionId"])
    assert len(ASKED.requests) == 1, "the identical call was not put to the user"
    decision = _one_decision(messages)
    assert decision["by"] == "rule" and decision["decision"] == "allow", decision
    assert contents_of(messages, "tool.completed"), "the rule let it run"

    third, messages = await scripted_run(bridge, tmp_path, "toolcompound", sessionId=first["sessionId"])
    assert third["status"] == "completed", third
    assert len(ASKED.requests) == 2, "the compound command was put to the user"
    assert contents_of(messages, "tool.failed")[0]["reason"] == "denied"
    assert not (tmp_path / "compound.txt").exists()


async def _pending(client: LanguageClient, cwd: Path, model: str, run_id: str) -> asyncio.Task[Any]:
    """Start a run whose one tool call the client holds unanswered; return once it is asked."""
    forever = asyncio.Event()

    async def hold(params: dict[str, Any]) -> Any:
        await forever.wait()

    ASKED.answer = hold
    run = asyncio.ensure_future(
        request(
            client,
            "pi/run",
            {"runId": run_id, "prompt": "go", "provider": "fake", "model": model, "cwd": str(cwd)},
        )
    )
    await asyncio.wait_for(ASKED.arrived.wait(), WAIT)
    return run


async def test_a_cancel_while_asking_answers_at_once_and_runs_nothing(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    run = await _pending(bridge, tmp_path, "write", "held")
    await request(bridge, "pi/cancel", {"runId": "held"})
    with pytest.raises(Exception) as cancelled:
        await asyncio.wait_for(run, WAIT)
    assert "cancel" in str(cancelled.value).lower()
    await asyncio.wait_for(ASKED.cancelled.wait(), WAIT)
    assert ASKED.withdrawn, "the bridge sent $/cancelRequest"
    messages = messages_of(bridge).by_run["held"]
    assert_stream_invariants(messages)
    assert _one_decision(messages)["decision"] == "cancelled"
    assert not (tmp_path / WRITE_FILE).exists(), "the late allow ran nothing"
    session = next(m["content"]["sessionId"] for m in messages if m["type"] == "session.started")
    ASKED.answer = _answer(ALLOW_ONCE)
    again, _ = await scripted_run(bridge, tmp_path, "text", sessionId=session)
    assert again["status"] == "completed", "the conversation goes on"


async def test_pi_killed_while_asking_settles_the_request(bridge: LanguageClient, tmp_path: Path) -> None:
    run = await _pending(bridge, tmp_path, "write", "killed")
    runs = await request(bridge, "pi/runs", {})
    (pid,) = [r["pid"] for r in runs["runs"] if r["runId"] == "killed"]
    os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(ASKED.cancelled.wait(), WAIT)
    assert ASKED.withdrawn, "the bridge sent $/cancelRequest"
    try:
        await asyncio.wait_for(run, WAIT)
    except Exception:  # the run may fail with the agent: what matters is that it ended
        pass
    messages = messages_of(bridge).by_run["killed"]
    assert_stream_invariants(messages)
    assert _one_decision(messages)["decision"] == "cancelled"
    assert not (tmp_path / WRITE_FILE).exists()
    session = next(m["content"]["sessionId"] for m in messages if m["type"] == "session.started")
    again, _ = await scripted_run(bridge, tmp_path, "text", sessionId=session)
    assert again["status"] == "completed", "the conversation goes on"


async def test_any_lsp_client_approves_through_show_message_request(
    message_bridge: LanguageClient, tmp_path: Path
) -> None:
    result, messages = await scripted_run(message_bridge, tmp_path, "tool")
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    message = asked["message"] if isinstance(asked, dict) else asked.message
    assert "echo hi" in message, "the default mode of a client that can answer is ask"
    decision = _one_decision(messages)
    assert decision["decision"] == "allow" and decision["by"] == "user"
    assert contents_of(messages, "tool.completed")


async def test_time_waiting_for_the_user_is_not_agent_silence(
    watched_bridge: LanguageClient, tmp_path: Path
) -> None:
    async def think(params: dict[str, Any]) -> Any:
        await asyncio.sleep(3 * SILENCE_S)  # the user's think time, longer than the silence limit
        return {"optionId": ALLOW_ONCE}

    ASKED.answer = think
    result, messages = await scripted_run(watched_bridge, tmp_path, "tool")
    assert result["status"] == "completed", result
    assert contents_of(messages, "tool.completed")


# A long command whose harmless start fills any title, and whose end is what it finally does.
LONG_START = "echo " + "harmless-looking-words " * 12
TAIL = "; touch tail-ran.txt"


async def test_the_whole_command_is_put_to_the_user_and_a_title_keeps_its_tail(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    command = LONG_START + TAIL
    assert len(command) > MAX_TITLE
    ASKED.answer = _answer(REJECT_ONCE)
    result, messages = await scripted_run(bridge, tmp_path, "shell", prompt=command)
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    assert asked["command"] == command, "the request carries the whole command"
    assert asked["input"]["command"] == command
    title = asked["title"]
    assert len(title) <= MAX_TITLE and " … " in title and title.endswith("touch tail-ran.txt"), title
    (requested,) = contents_of(messages, "permission.requested")
    assert requested["title"] == title
    assert not (tmp_path / "tail-ran.txt").exists()


async def test_the_message_request_fallback_shows_the_whole_command(
    message_bridge: LanguageClient, tmp_path: Path
) -> None:
    command = LONG_START + TAIL
    result, _ = await scripted_run(message_bridge, tmp_path, "shell", prompt=command)
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    message = asked["message"] if isinstance(asked, dict) else asked.message
    assert command in message, message
    assert (tmp_path / "tail-ran.txt").exists(), "the user allowed what they read, and it ran"


async def test_an_always_rule_allows_exactly_its_command_and_a_prefix_rule_says_so(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    ASKED.answer = _answer(ALLOW_ALWAYS)
    first, _ = await scripted_run(bridge, tmp_path, "shell", prompt="find . -maxdepth 0")
    assert first["status"] == "completed", first
    names = {o["optionId"]: o["name"] for o in ASKED.requests[0]["options"]}
    assert names[ALLOW_ALWAYS] == "Always allow `find . -maxdepth 0` in this workspace"
    assert names[ALLOW_ALWAYS_PREFIX] == "Always allow `find . *` in this workspace"

    session = first["sessionId"]
    ASKED.answer = _answer(REJECT_ONCE)
    wider = "find . -maxdepth 0 -fprint wider.txt"  # the same start, and it writes a file
    second, messages = await scripted_run(bridge, tmp_path, "shell", prompt=wider, sessionId=session)
    assert second["status"] == "completed", second
    assert [r["command"] for r in ASKED.requests[1:]] == [wider], "the wider command was asked"
    assert _one_decision(messages)["by"] == "user"
    assert not (tmp_path / "wider.txt").exists()

    ASKED.answer = _answer(ALLOW_ALWAYS_PREFIX)
    third, _ = await scripted_run(bridge, tmp_path, "shell", prompt=wider, sessionId=session)
    assert third["status"] == "completed", third
    assert (tmp_path / "wider.txt").exists(), "the user picked `find . *`"
    asked = len(ASKED.requests)
    again = "find . -maxdepth 0 -fprint again.txt"
    fourth, messages = await scripted_run(bridge, tmp_path, "shell", prompt=again, sessionId=session)
    assert fourth["status"] == "completed", fourth
    assert len(ASKED.requests) == asked and _one_decision(messages)["by"] == "rule"
    assert (tmp_path / "again.txt").exists()


@pytest.mark.parametrize(
    ("command", "asked"),
    [
        ("/bin/rm victim.txt", False),
        ('"r""m" victim.txt', False),
        ("\\rm victim.txt", False),
        ('eval "r""m" victim.txt', False),
        ("sh -c 'rm victim.txt'", False),
        ("env rm victim.txt", False),
        ("command rm victim.txt", False),
        ("echo victim.txt | xargs rm", False),
        ("find . -name victim.txt -exec rm {} +", False),
        ("x=m; r${x} victim.txt", False),
    ],
)
async def test_a_deny_rule_on_rm_holds_however_rm_is_written(
    bridge: LanguageClient, tmp_path: Path, command: str, asked: bool
) -> None:
    """The deny rule refuses without asking however `rm` is spelled, and a name it cannot know too
    (asking would have the user judge a spelling the model chose to slip past the rule)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    deny = {
        "id": "no-rm",
        "tool": "*",
        "match": {"commandPrefix": ["rm"]},
        "decision": "deny",
        "scope": "workspace",
    }
    await request(bridge, "pi/setPermissions", {"cwd": str(tmp_path), "rules": [deny]})
    ASKED.answer = _answer(REJECT_ONCE)
    result, messages = await scripted_run(bridge, tmp_path, "shell", prompt=command)
    assert result["status"] == "completed", result
    assert victim.read_text() == "keep me", command
    assert len(ASKED.requests) == (1 if asked else 0), command
    decision = _one_decision(messages)
    assert decision["decision"] == "reject", decision
    assert decision["by"] == ("user" if asked else "rule"), decision


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def unheld_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """No checkpoints: no run's first tool call is held for one, so `full` takes pi's fast path."""
    yield await _start(lsp_client, pi_agent_dir, PERMISSIONS, checkpoints=False)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_deny_rule_holds_in_full_mode_where_nothing_else_is_asked(
    unheld_bridge: LanguageClient, tmp_path: Path
) -> None:
    """pi's gate skips the bridge in `full`; under a deny rule it must not (issue 34, item 12)."""
    bridge = unheld_bridge
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    deny = {
        "id": "no-rm",
        "tool": "*",
        "match": {"commandPrefix": ["rm"]},
        "decision": "deny",
        "scope": "workspace",
    }
    await request(bridge, "pi/setPermissions", {"cwd": str(tmp_path), "rules": [deny]})
    result, messages = await scripted_run(
        bridge, tmp_path, "shell", prompt="env /bin/rm victim.txt", mode="full"
    )
    assert result["status"] == "completed", result
    assert victim.read_text() == "keep me"
    assert ASKED.requests == [], "full asks nobody"
    decision = _one_decision(messages)
    assert (decision["decision"], decision["by"]) == ("reject", "rule"), decision
    session = result["sessionId"]
    again, messages = await scripted_run(
        bridge, tmp_path, "shell", prompt="touch made.txt", sessionId=session
    )
    assert again["status"] == "completed", again
    assert (tmp_path / "made.txt").exists(), "any other command runs unasked in full"
    assert ASKED.requests == []
