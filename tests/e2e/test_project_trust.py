"""Project trust on real pi 1.6.0 with the scripted model: a folder's `.pi/prompts` template is
expanded only once the user trusts the folder, asked once through the approval channel.

Each project holds `.pi/prompts/greet.md`; the prompt `/greet` reaches the model as the
template's text in a trusted folder and as `/greet` itself in an untrusted one (pi skips the
folder's files without a word in rpc mode unless it is started with `--approve`). The client
declares `permissions`, so the question comes as `pi/requestPermission`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.policy.trust.project_trust import NEVER, NOT_NOW, TRUST_ALWAYS, TRUST_TOOL
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import last_user_text_of
from tests.conftest import requires_pi
from tests.support.env import ROOT, WAIT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, make_client, messages_of, request, start_request
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

TEMPLATE_WORD = "TRUSTED-TEMPLATE-7f3a"
_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-trust-state-"))

Answer = Callable[[dict[str, Any]], Awaitable[Any]]


def project(root: Path, name: str) -> Path:
    """A folder whose only pi file is the prompt template `/greet`."""
    folder = root / name
    (folder / ".pi" / "prompts").mkdir(parents=True)
    (folder / ".pi" / "prompts" / "greet.md").write_text(
        f"---\ndescription: greet\n---\nSay the word {TEMPLATE_WORD} and nothing else.\n"
    )
    return folder


class Asked:
    """The client's side: every pi/requestPermission it got, the withdrawn ones, its answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.withdrawn: list[Any] = []
        self.answer: Answer = _choose(TRUST_ALWAYS)
        self.arrived = asyncio.Event()
        self.cancelled = asyncio.Event()


def _choose(option_id: str) -> Answer:
    async def answer(params: dict[str, Any]) -> Any:
        return {"optionId": option_id}

    return answer


def _client(asked: Asked) -> Callable[[], LanguageClient]:
    def make() -> LanguageClient:
        client = make_client()

        @client.feature("pi/requestPermission")
        async def on_request(ls: LanguageClient, params: Any) -> Any:
            asked.requests.append(params)
            asked.arrived.set()
            return await asked.answer(params)

        cancel_notification = client.protocol._handle_cancel_notification

        def on_cancel(msg_id: Any) -> None:  # pygls's own $/cancelRequest handling, observed
            asked.withdrawn.append(msg_id)
            asked.cancelled.set()
            cancel_notification(msg_id)

        client.protocol._handle_cancel_notification = on_cancel  # type: ignore[method-assign]
        return client

    return make


ASKED = Asked()
PERMISSIONS = types.ClientCapabilities(experimental={"piBridge": {"permissions": True}})


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)


async def _start(client: LanguageClient, pi_agent_dir: Path, capabilities: types.ClientCapabilities) -> None:
    ASKED.__init__()  # type: ignore[misc]
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            initialization_options={"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False},
            root_uri=ROOT.as_uri(),
        )
    )


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    await _start(lsp_client, pi_agent_dir, PERMISSIONS)
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def full_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """A client that declares nothing: its conversations run in `full`, and nobody is asked."""
    await _start(lsp_client, pi_agent_dir, types.ClientCapabilities())
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _greet(
    client: LanguageClient, model: ScriptedModelServer, cwd: Path, **params: Any
) -> tuple[dict[str, Any], str | None, list[dict[str, Any]]]:
    """`/greet` in `cwd`: the answer, what the model got as the prompt, and the run's messages."""
    before = len(model.requests)
    run = {"prompt": "/greet", "provider": "fake", "model": "text", "cwd": str(cwd), **params}
    result = await request(client, "pi/run", run)
    sent = [r for r in model.requests[before:] if r["body"]]
    seen = last_user_text_of(sent[-1]["body"]) if sent else None
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, seen, messages


def _trust_messages(messages: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    requested = [c for c in contents_of(messages, "permission.requested") if c["tool"] == TRUST_TOOL]
    ids = {c["toolCallId"] for c in requested}
    resolved = [c for c in contents_of(messages, "permission.resolved") if c["toolCallId"] in ids]
    return requested, resolved


async def test_a_trusted_folder_expands_its_template_an_untrusted_one_does_not_each_asked_once(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    trusted, untrusted = project(tmp_path, "trusted"), project(tmp_path, "untrusted")

    ASKED.answer = _choose(TRUST_ALWAYS)
    first, seen, messages = await _greet(bridge, scripted_model, trusted)
    assert first["status"] == "completed", first
    assert seen is not None and TEMPLATE_WORD in seen, f"the template reached the model: {seen!r}"
    [asked] = ASKED.requests
    assert asked["tool"] == TRUST_TOOL and ".pi/prompts" in asked["title"], asked
    assert asked["input"]["resources"] == [".pi/prompts"]
    assert {o["kind"] for o in asked["options"]} == {
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    }
    requested, resolved = _trust_messages(messages)
    assert len(requested) == 1 and resolved == [
        {
            "toolCallId": requested[0]["toolCallId"],
            "decision": "allow",
            "by": "user",
            "optionId": TRUST_ALWAYS,
        }
    ], messages
    again, seen, messages = await _greet(bridge, scripted_model, trusted, sessionId=first["sessionId"])
    assert again["status"] == "completed" and seen is not None and TEMPLATE_WORD in seen, seen
    assert len(ASKED.requests) == 1 and _trust_messages(messages) == ([], []), "asked once"

    ASKED.answer = _choose(NEVER)
    refused, seen, messages = await _greet(bridge, scripted_model, untrusted)
    assert refused["status"] == "completed", refused
    assert seen is not None and seen.strip() == "/greet", f"the template stayed out: {seen!r}"
    assert len(ASKED.requests) == 2 and _trust_messages(messages)[1][0]["decision"] == "reject"
    _, seen, _ = await _greet(bridge, scripted_model, untrusted)
    assert len(ASKED.requests) == 2 and seen is not None and seen.strip() == "/greet", "remembered: never"

    saved = sorted(json.loads(p.read_text())["decision"] for p in (_STATE / "trust").glob("*.json"))
    assert saved == ["trusted", "untrusted"], "both answers were saved in the bridge's state dir"
    assert [p.name for p in (trusted / ".pi").iterdir()] == ["prompts"], "nothing written in the workspace"


async def test_not_now_leaves_the_folder_untrusted_for_this_bridge_without_asking_again(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "later")
    ASKED.answer = _choose(NOT_NOW)
    _, seen, _ = await _greet(bridge, scripted_model, folder)
    _, seen_again, _ = await _greet(bridge, scripted_model, folder)
    assert [seen, seen_again] == ["/greet", "/greet"] and len(ASKED.requests) == 1
    assert not list((_STATE / "trust").glob("*.json")) or all(
        json.loads(p.read_text())["cwd"] != str(folder.resolve()) for p in (_STATE / "trust").glob("*.json")
    ), "not now is not saved"


async def test_an_answer_that_is_none_of_the_options_trusts_nothing_and_the_next_prompt_asks_again(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "garbled")
    ASKED.answer = _choose("trust-everything-forever")
    result, seen, messages = await _greet(bridge, scripted_model, folder)
    assert result["status"] == "completed" and seen == "/greet", (result, seen)
    assert _trust_messages(messages)[1][0]["decision"] == "cancelled"
    assert any("no answer" in c["text"] for c in contents_of(messages, "notice")), messages
    ASKED.answer = _choose(TRUST_ALWAYS)
    _, seen, _ = await _greet(bridge, scripted_model, folder)
    assert len(ASKED.requests) == 2 and seen is not None and TEMPLATE_WORD in seen, (
        "asked again, then trusted"
    )


async def test_a_question_never_answered_does_not_hang_the_run_its_cancel_withdraws_it(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "late")
    held = asyncio.Event()

    async def never(params: dict[str, Any]) -> Any:
        await held.wait()
        return {"optionId": TRUST_ALWAYS}

    ASKED.answer = never
    run = {"prompt": "/greet", "provider": "fake", "model": "text", "cwd": str(folder), "runId": "held-trust"}
    _, task = start_request(bridge, "pi/run", run)
    await asyncio.wait_for(ASKED.arrived.wait(), WAIT)
    await request(bridge, "pi/cancel", {"runId": "held-trust"})
    with pytest.raises(Exception) as cancelled:  # a cancelled pi/run answers RequestCancelled
        await asyncio.wait_for(task, WAIT)
    assert "cancel" in str(cancelled.value).lower()
    await asyncio.wait_for(ASKED.cancelled.wait(), WAIT)
    held.set()  # the late "trust" is ignored: the next prompt is asked again
    ASKED.answer = _choose(NOT_NOW)
    _, seen, _ = await _greet(bridge, scripted_model, folder)
    assert len(ASKED.requests) == 2 and seen == "/greet"


async def test_full_mode_trusts_nothing_and_says_why_and_how(
    full_bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "full")
    result, seen, messages = await _greet(full_bridge, scripted_model, folder)
    assert result["status"] == "completed" and seen == "/greet", (result, seen)
    assert ASKED.requests == [] and _trust_messages(messages) == ([], [])
    [notice] = [c for c in contents_of(messages, "notice") if "not trusted" in c["text"]]
    assert ".pi/prompts" in notice["text"] and "pi-bridge trust" in notice["text"], notice


def test_a_new_bridge_remembers_the_answer_and_asks_nothing(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "remembered")
    state = tmp_path / "state"
    asked: list[dict[str, Any]] = []
    seen: list[str | None] = []
    for _ in range(2):
        bridge = RawBridge(env={STATE_DIR_ENV: str(state)})
        try:

            def answer(message: dict[str, Any], bridge: RawBridge = bridge) -> None:
                if message.get("method") == "pi/requestPermission":
                    asked.append(message["params"])
                    bridge.answer(message["id"], {"optionId": TRUST_ALWAYS})

            bridge.on_request = answer
            bridge.initialize(
                {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False},
                {"experimental": {"piBridge": {"permissions": True}}},
            )
            before = len(scripted_model.requests)
            run = {"prompt": "/greet", "provider": "fake", "model": "text", "cwd": str(folder)}
            answered = bridge.call("pi/run", run, timeout=WAIT * 2)
            assert answered["result"]["status"] == "completed", answered
            sent = [r for r in scripted_model.requests[before:] if r["body"]]
            seen.append(last_user_text_of(sent[-1]["body"]))
        finally:
            bridge.close()
    assert len(asked) == 1, "the second bridge asked nothing"
    assert all(text is not None and TEMPLATE_WORD in text for text in seen), seen


async def test_first_runs_of_one_folder_share_one_question_and_one_cancelled_meanwhile_ends_at_once(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "shared")
    release = asyncio.Event()

    async def held(params: dict[str, Any]) -> Any:
        await release.wait()
        return {"optionId": TRUST_ALWAYS}

    ASKED.answer = held
    before = len(scripted_model.requests)
    run = {"prompt": "/greet", "provider": "fake", "model": "text", "cwd": str(folder)}
    _, first = start_request(bridge, "pi/run", {**run, "runId": "shared-1"})
    await asyncio.wait_for(ASKED.arrived.wait(), WAIT)
    _, second = start_request(bridge, "pi/run", {**run, "runId": "shared-2"})
    _, third = start_request(bridge, "pi/run", {**run, "runId": "shared-3"})
    await request(bridge, "pi/runs", {})  # both have started: the bridge read them in order
    await request(bridge, "pi/cancel", {"runId": "shared-3"})
    with pytest.raises(Exception) as cancelled:  # while the question is still open
        await asyncio.wait_for(third, WAIT)
    assert "cancel" in str(cancelled.value).lower()
    release.set()
    answers = [await asyncio.wait_for(task, WAIT * 2) for task in (first, second)]
    assert [a["status"] for a in answers] == ["completed", "completed"], answers
    assert len(ASKED.requests) == 1, "one question for the folder"
    sent = [last_user_text_of(r["body"]) or "" for r in scripted_model.requests[before:] if r["body"]]
    assert len(sent) == 2 and all(TEMPLATE_WORD in text for text in sent), sent
