"""The conversation toolbox over LSP, on real pi 1.6.0 with the scripted model: `/` commands
(pi's prompt templates and skills, the bridge's own), compaction by hand and by threshold,
titles, export, a new session, delete and resume.

pi keeps the last `compaction.keepRecentTokens` (20000 by default) out of any summary, so the
agent dir here keeps 1: the scripted model's short turns can then be compacted.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, initialize, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

STATE_DIR = tempfile.mkdtemp(prefix="pi-bridge-toolbox-state-")
TEMPLATE = "---\ndescription: Fix the failing tests\n---\nPlease fix the tests named $@ now.\n"
SKILL = "---\nname: review\ndescription: Review the code with care\n---\nSKILL-BODY: read every line twice.\n"


def _agent_dir(pi_agent_dir: Path, where: Path, compaction: dict[str, int]) -> Path:
    """The scripted model's agent dir with a prompt template, a skill and compaction settings."""
    shutil.copytree(pi_agent_dir, where, ignore=shutil.ignore_patterns("sessions"))
    (where / "prompts").mkdir(exist_ok=True)
    (where / "prompts" / "fix-tests.md").write_text(TEMPLATE)
    (where / "skills" / "review").mkdir(parents=True)
    (where / "skills" / "review" / "SKILL.md").write_text(SKILL)
    settings_file = where / "settings.json"
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    settings["compaction"] = compaction
    settings_file.write_text(json.dumps(settings))
    return where


async def _bridge(client: LanguageClient, agent_dir: Path) -> None:
    await initialize(client, {"env": {"PI_CODING_AGENT_DIR": str(agent_dir)}, "warmPool": False})


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR}))
async def bridge(
    lsp_client: LanguageClient, pi_agent_dir: Path, tmp_path: Path
) -> AsyncIterator[LanguageClient]:
    await _bridge(lsp_client, _agent_dir(pi_agent_dir, tmp_path / "pi-agent", {"keepRecentTokens": 1}))
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR}))
async def filling_bridge(
    lsp_client: LanguageClient, pi_agent_dir: Path, tmp_path: Path
) -> AsyncIterator[LanguageClient]:
    # A 128000-token window less 127500 reserved: one turn of the scripted model crosses it.
    compaction = {"keepRecentTokens": 1, "reserveTokens": 127_500}
    await _bridge(lsp_client, _agent_dir(pi_agent_dir, tmp_path / "pi-agent", compaction))
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _run(client: LanguageClient, cwd: Path, prompt: str, model: str = "echo", **more: Any) -> Any:
    params = {"prompt": prompt, "provider": "fake", "model": model, "cwd": str(cwd), **more}
    with anyio.fail_after(40):
        result = await request(client, "pi/run", params)
    assert_stream_invariants(messages_of(client).by_run[result["runId"]])
    return result


def _messages(client: LanguageClient, result: Any) -> list[dict[str, Any]]:
    return messages_of(client).by_run[result["runId"]]


async def test_commands_list_the_bridge_s_pi_s_templates_and_skills_and_each_runs(
    bridge: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    listed = await request(bridge, "pi/commands", {"cwd": str(tmp_path)})
    by_name = {c["name"]: c for c in listed["commands"]}
    assert [c["name"] for c in listed["commands"][:5]] == ["compact", "autocompact", "name", "export", "new"]
    assert by_name["compact"] == {
        "name": "compact",
        "description": by_name["compact"]["description"],
        "source": "bridge",
        "argumentHint": "[instructions]",
    }
    assert by_name["fix-tests"]["source"] == "prompt"
    assert by_name["fix-tests"]["description"] == "Fix the failing tests"
    assert by_name["skill:review"]["source"] == "skill"
    # The conversation that answered is the client's for its next prompt.
    session = listed["sessionId"]
    templated = await _run(bridge, tmp_path, "/fix-tests unit-7f3", sessionId=session)
    assert templated["sessionId"] == session
    assert templated["text"] == "ECHO:Please fix the tests named unit-7f3 now."
    skilled = await _run(bridge, tmp_path, "/skill:review the parser", sessionId=session)
    assert "SKILL-BODY: read every line twice." in skilled["text"]
    # Asked of the live conversation: the same list.
    again = await request(bridge, "pi/commands", {"sessionId": session})
    assert again["commands"] == listed["commands"]


async def test_compact_with_instructions_streams_its_messages_and_the_context_falls(
    bridge: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    first = await _run(bridge, tmp_path, "first " + "word " * 300, model="text")
    session = first["sessionId"]
    second = await _run(bridge, tmp_path, "second " + "word " * 300, model="text", sessionId=session)
    before = contents_of(_messages(bridge, second), "terminal.completed")[0]["contextUsage"]["tokens"]
    compacted = await _run(bridge, tmp_path, "/compact keep-tag-c41 only", model="text", sessionId=session)
    assert compacted["status"] == "completed", compacted
    assert compacted["sessionId"] == session
    messages = _messages(bridge, compacted)
    kinds = [m["type"] for m in messages]
    assert (
        kinds.index("session.compacting")
        < kinds.index("session.compacted")
        < kinds.index("terminal.completed")
    )
    assert contents_of(messages, "session.compacting") == [{"reason": "manual"}]
    sizes = contents_of(messages, "session.compacted")[0]
    assert sizes["tokensAfter"] < sizes["tokensBefore"], sizes
    assert compacted["text"].startswith("Compacted the conversation:"), compacted["text"]
    assert not [m for m in messages if m["type"] == "tool.call"]
    # The summary request carried the instructions.
    summaries = [r for r in scripted_model.requests if "keep-tag-c41" in json.dumps(r["body"])]
    assert summaries, "the instructions never reached the model"
    after = await _run(bridge, tmp_path, "third", model="text", sessionId=session)
    usage = contents_of(_messages(bridge, after), "terminal.completed")[0]["contextUsage"]["tokens"]
    assert usage < before, (usage, before)


async def test_a_session_too_small_to_compact_fails_at_once_and_is_not_retried(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    # A conversation opened (by pi/commands) and never prompted: pi has nothing to summarize.
    opened = (await request(bridge, "pi/commands", {"cwd": str(tmp_path)}))["sessionId"]
    refused = await _run(
        bridge, tmp_path, "/compact", model="text", sessionId=opened, retry={"maxAttempts": 3}
    )
    assert refused["status"] == "failed" and refused["attempts"] == 1, refused
    assert refused["error"]["kind"] == "usage" and not refused["error"]["retryable"]


async def test_compaction_by_threshold_shows_in_the_turn_that_crossed_it(
    filling_bridge: LanguageClient, tmp_path: Path
) -> None:
    first = await _run(filling_bridge, tmp_path, "fill the context", model="text")
    second = await _run(filling_bridge, tmp_path, "and again", model="text", sessionId=first["sessionId"])
    compacting = [
        c for r in (first, second) for c in contents_of(_messages(filling_bridge, r), "session.compacting")
    ]
    assert {"reason": "threshold"} in compacting, compacting
    compacted = [
        c for r in (first, second) for c in contents_of(_messages(filling_bridge, r), "session.compacted")
    ]
    assert compacted and all("tokensBefore" in c for c in compacted), compacted


async def test_autocompact_off_stops_the_threshold_compaction(
    filling_bridge: LanguageClient, tmp_path: Path
) -> None:
    first = await _run(filling_bridge, tmp_path, "/autocompact off", model="text")
    assert first["status"] == "completed" and first["text"] == "Auto-compaction is off.", first
    session = first["sessionId"]
    for prompt in ("fill the context", "and again"):
        turn = await _run(filling_bridge, tmp_path, prompt, model="text", sessionId=session)
        assert not contents_of(_messages(filling_bridge, turn), "session.compacting")


async def test_rename_shows_in_the_listing_and_in_the_stream(bridge: LanguageClient, tmp_path: Path) -> None:
    first = await _run(bridge, tmp_path, "hello")
    session = first["sessionId"]
    renamed = await request(
        bridge, "pi/renameSession", {"sessionId": session, "title": "  Fix  the\nparser "}
    )
    assert renamed == {"sessionId": session, "title": "Fix the parser"}
    listed = await request(bridge, "pi/sessions", {"cwd": str(tmp_path)})
    assert [s["title"] for s in listed["sessions"] if s["sessionId"] == session] == ["Fix the parser"]
    by_command = await _run(bridge, tmp_path, "/name Parser, round two", sessionId=session)
    assert contents_of(_messages(bridge, by_command), "session.renamed") == [{"title": "Parser, round two"}]
    assert by_command["text"] == "Renamed the conversation: Parser, round two"
    # A stored session without a live agent is renamed too (its agent resumed for it).
    assert (await request(bridge, "pi/closeSession", {"sessionId": session}))["closed"] is True
    await request(bridge, "pi/renameSession", {"sessionId": session, "title": "Cold rename"})
    listed = await request(bridge, "pi/sessions", {"cwd": str(tmp_path)})
    assert [s["title"] for s in listed["sessions"] if s["sessionId"] == session] == ["Cold rename"]


async def test_delete_removes_the_session_and_resume_keeps_the_history(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    kept = await _run(bridge, tmp_path, "remember kept-9d1")
    doomed = await _run(bridge, tmp_path, "remember doomed-2b7")
    await request(bridge, "pi/closeSession", {"sessionId": kept["sessionId"]})
    resumed = await _run(bridge, tmp_path, "again", sessionId=kept["sessionId"])
    assert contents_of(_messages(bridge, resumed), "session.resumed")[0]["sessionId"] == kept["sessionId"]
    history = await request(bridge, "pi/session", {"sessionId": kept["sessionId"]})
    assert [t["prompt"] for t in history["turns"]] == ["remember kept-9d1", "again"]
    assert (await request(bridge, "pi/deleteSession", {"sessionId": doomed["sessionId"]})) == {
        "deleted": True
    }
    listed = await request(bridge, "pi/sessions", {"cwd": str(tmp_path)})
    ids = {s["sessionId"] for s in listed["sessions"]}
    assert doomed["sessionId"] not in ids and kept["sessionId"] in ids
    assert (await request(bridge, "pi/session", {"sessionId": doomed["sessionId"]}))["found"] is False
    assert (await request(bridge, "pi/deleteSession", {"sessionId": doomed["sessionId"]})) == {
        "deleted": False
    }
    assert not [
        c for c in (await request(bridge, "pi/runs", {}))["live"] if c["sessionId"] == doomed["sessionId"]
    ]
    with pytest.raises(JsonRpcException) as unknown:
        await request(bridge, "pi/renameSession", {"sessionId": doomed["sessionId"], "title": "x"})
    assert unknown.value.code == -32002


async def test_export_writes_html_in_the_state_dir_never_the_workspace(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    first = await _run(bridge, workspace, "export-me-51a")
    exported = await _run(bridge, workspace, "/export", sessionId=first["sessionId"])
    path = Path(exported["text"])
    assert exported["status"] == "completed" and path.is_absolute(), exported
    assert path.is_relative_to(Path(STATE_DIR)), path
    page = path.read_text()
    # pi embeds the session as base64 JSON in the page.
    embedded = re.search(r'id="session-data"[^>]*>([^<]+)<', page)
    assert embedded is not None and "export-me-51a" in base64.b64decode(embedded.group(1)).decode()
    assert sorted(os.listdir(workspace)) == [], "the workspace got a file"


async def test_new_starts_a_fresh_session_on_the_same_process(bridge: LanguageClient, tmp_path: Path) -> None:
    first = await _run(bridge, tmp_path, "old-context-77e")
    fresh = await _run(bridge, tmp_path, "/new", sessionId=first["sessionId"])
    assert fresh["sessionId"] != first["sessionId"]
    assert contents_of(_messages(bridge, fresh), "session.started")[-1]["sessionId"] == fresh["sessionId"]
    follow = await _run(bridge, tmp_path, "what came before?", sessionId=fresh["sessionId"])
    assert follow["text"] == "ECHO:what came before?"
    history = await request(bridge, "pi/session", {"sessionId": first["sessionId"]})
    assert [t["prompt"] for t in history["turns"]] == ["old-context-77e"]


@pytest.mark.parametrize(
    ("prompt", "why"),
    [
        ("/autocompact maybe", "/autocompact takes `on` or `off`"),
        ("/name", "/name takes the conversation's title"),
        ("/name " + "t" * 201, "at most 200 characters"),
        ("/export now", "/export takes no argument"),
    ],
)
async def test_a_bridge_command_with_a_wrong_argument_is_a_clear_error(
    bridge: LanguageClient, tmp_path: Path, prompt: str, why: str
) -> None:
    with pytest.raises(JsonRpcException) as refused:
        await request(bridge, "pi/run", {"prompt": prompt, "cwd": str(tmp_path)})
    assert refused.value.code == -32602 and why in refused.value.message


async def test_toolbox_requests_refuse_bad_params(bridge: LanguageClient, tmp_path: Path) -> None:
    for method, params in (
        ("pi/renameSession", {"sessionId": "s", "title": ""}),
        ("pi/renameSession", {"sessionId": "s", "title": 5}),
        ("pi/deleteSession", {}),
        ("pi/commands", {"cwd": "relative/dir"}),
    ):
        with pytest.raises(JsonRpcException) as refused:
            await request(bridge, method, params)
        assert refused.value.code == -32602, (method, params)
    with pytest.raises(JsonRpcException) as blank:
        await request(bridge, "pi/renameSession", {"sessionId": "s", "title": " \n "})
    assert "visible character" in blank.value.message


async def test_the_bridge_s_tool_overrides_offer_the_model_pi_s_own_tools_and_no_more(
    bridge: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    # The bridge's extension replaces pi's file tools and bash; pi turns an extension's tool on
    # when it registers, so an override of ls, find or grep (off in pi by default) would hand the
    # model three tools, and a longer prompt, that the user never chose.
    await _run(bridge, tmp_path, "which tools-c52?", model="text")
    [seen] = [r for r in scripted_model.requests if "which tools-c52?" in json.dumps(r["body"])][-1:]
    tools = seen["body"].get("tools") or []
    names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools]
    assert names == ["read", "bash", "edit", "write"], names
