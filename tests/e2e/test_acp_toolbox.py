"""The conversation toolbox over ACP, through the official Python SDK's client, on real pi 1.6.0
with the scripted model: available_commands_update, a bridge command as a prompt, compaction as
a notice, titles as session_info_update, session/resume and session/delete."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError

from tests.support.acp import acp_bridge, new_session, prompt, text_of
from tests.support.env import WAIT, requires_pi

pytestmark = [requires_pi]

TEMPLATE = "---\ndescription: Fix the failing tests\n---\nPlease fix the tests named $@ now.\n"


@pytest.fixture
def toolbox_agent_dir(pi_agent_dir: Path, tmp_path: Path) -> Path:
    """The scripted model's agent dir with a prompt template, compacting short sessions too."""
    where = tmp_path / "pi-agent"
    shutil.copytree(pi_agent_dir, where, ignore=shutil.ignore_patterns("sessions"))
    (where / "prompts").mkdir(exist_ok=True)
    (where / "prompts" / "fix-tests.md").write_text(TEMPLATE)
    settings_file = where / "settings.json"
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    settings["compaction"] = {"keepRecentTokens": 1}
    settings_file.write_text(json.dumps(settings))
    return where


def _is(kind: str) -> Any:
    return lambda update: update.session_update == kind


async def test_acp_lists_the_commands_after_session_new_and_runs_one_typed_as_a_prompt(
    toolbox_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with acp_bridge(toolbox_agent_dir, workspace) as (conn, recorder, _):
        session_id = await new_session(conn, workspace, "echo")
        update = await recorder.wait_for(_is("available_commands_update"))
        names = [command.name for command in update.available_commands]
        assert names[:4] == ["compact", "autocompact", "name", "export"] and "new" not in names
        assert "fix-tests" in names
        compact = update.available_commands[0]
        assert compact.input is not None and compact.input.root.hint == "[instructions]"
        answer = await prompt(conn, session_id, "/fix-tests acp-5e2", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        assert text_of(recorder.of(session_id)) == "ECHO:Please fix the tests named acp-5e2 now."
        # The same list again after the prompt: no second update.
        await prompt(conn, session_id, "once more", timeout=WAIT * 2)
        kinds = [u.session_update for u in recorder.of(session_id)]
        assert kinds.count("available_commands_update") == 1, kinds


async def test_acp_compaction_is_a_notice_and_a_title_is_a_session_info_update(
    toolbox_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with acp_bridge(toolbox_agent_dir, workspace) as (conn, recorder, _):
        session_id = await new_session(conn, workspace, "text")
        for words in ("first " + "word " * 800, "second " + "word " * 800):
            await prompt(conn, session_id, words, timeout=WAIT * 2)
        recorder.clear()
        answer = await prompt(conn, session_id, "/compact keep the decisions", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        notes = [
            u.field_meta["piBridge"]
            for u in recorder.of(session_id)
            if u.session_update == "agent_message_chunk" and u.field_meta
        ]
        assert {"compacting": {"reason": "manual"}} in notes, notes
        sizes = next(note["compacted"] for note in notes if "compacted" in note)
        assert sizes["tokensAfter"] < sizes["tokensBefore"], sizes
        assert "Compacted the conversation:" in text_of(recorder.of(session_id))
        await prompt(conn, session_id, "/name  The ACP  title ", timeout=WAIT * 2)
        info = await recorder.wait_for(_is("session_info_update"))
        assert info.title == "The ACP title"
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(workspace)), WAIT)
        assert [s.title for s in listed.sessions if s.session_id == session_id] == ["The ACP title"]


async def test_acp_resume_goes_on_with_the_history_and_delete_removes_the_session(
    toolbox_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with acp_bridge(toolbox_agent_dir, workspace) as (conn, _, _):
        kept = await new_session(conn, workspace, "echo")
        await prompt(conn, kept, "remember acp-kept-31c", timeout=WAIT * 2)
        doomed = await new_session(conn, workspace, "echo")
        await prompt(conn, doomed, "remember acp-doomed-8aa", timeout=WAIT * 2)
    # A new connection, a new bridge: the stored sessions only.
    async with acp_bridge(toolbox_agent_dir, workspace) as (conn, recorder, _):
        initialized = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        capabilities = initialized.agent_capabilities.session_capabilities
        assert (
            capabilities is not None and capabilities.resume is not None and capabilities.delete is not None
        )
        await asyncio.wait_for(conn.resume_session(cwd=str(workspace), session_id=kept), WAIT)
        await recorder.wait_for(_is("available_commands_update"))
        assert not [u for u in recorder.of(kept) if u.session_update == "user_message_chunk"], "no replay"
        answer = await prompt(conn, kept, "what did I say?", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        deleted = await asyncio.wait_for(
            conn._conn.send_request("session/delete", {"sessionId": doomed}), WAIT
        )
        assert deleted == {}
        listed = await asyncio.wait_for(conn.list_sessions(cwd=str(workspace)), WAIT)
        ids = {s.session_id for s in listed.sessions}
        assert kept in ids and doomed not in ids
        with pytest.raises(RequestError) as unknown:
            await asyncio.wait_for(conn.resume_session(cwd=str(workspace), session_id=doomed), WAIT)
        assert unknown.value.code == -32002
        with pytest.raises(RequestError) as bad:
            await asyncio.wait_for(conn._conn.send_request("session/delete", {"sessionId": 7}), WAIT)
        assert bad.value.code == -32602


async def test_acp_rewind_points_and_rewind_and_session_fork(toolbox_agent_dir: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "old.txt").write_text("old\n")
    full = {"piBridge": {"defaultMode": "full"}}
    async with acp_bridge(toolbox_agent_dir, workspace, meta=full) as (conn, recorder, _):
        initialized = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        assert "_pi/rewind" in initialized.field_meta["piBridge"]["extMethods"]
        assert initialized.agent_capabilities.session_capabilities.fork is not None
        session_id = await new_session(conn, workspace, "shell")
        await prompt(conn, session_id, "echo made > new.txt && rm old.txt", timeout=WAIT * 2)
        await prompt(conn, session_id, "echo x > extra.txt", timeout=WAIT * 2)
        async with asyncio.timeout(WAIT):  # each turn's record is written just after its answer
            while True:
                points = await conn.ext_method("pi/rewind_points", {"sessionId": session_id})
                if len(points["checkpoints"]) == 2:
                    break
                await asyncio.sleep(0.05)
        assert [c["files"] for c in points["checkpoints"]] == [["new.txt", "old.txt"], ["extra.txt"]]
        second = points["checkpoints"][1]["checkpointId"]
        rewound = await asyncio.wait_for(
            conn.ext_method(
                "pi/rewind", {"sessionId": session_id, "checkpointId": second, "restore": "both"}
            ),
            WAIT,
        )
        assert rewound["restored"] == ["extra.txt"] and not (workspace / "extra.txt").exists()
        moved = rewound["sessionId"]
        assert moved != session_id
        # The conversation goes on in the session the rewind names.
        await asyncio.wait_for(
            conn.set_config_option(config_id="model", session_id=moved, value="fake/echo"), WAIT
        )
        answer = await prompt(conn, moved, "after the rewind", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        assert text_of(recorder.of(moved)).endswith("ECHO:after the rewind")
        forked = await asyncio.wait_for(conn.fork_session(session_id=moved, cwd=str(workspace)), WAIT)
        assert forked.session_id not in (moved, session_id)
        await prompt(conn, forked.session_id, "in the fork", timeout=WAIT * 2)
        with pytest.raises(RequestError) as bad:
            await asyncio.wait_for(conn.ext_method("pi/rewind", {"sessionId": moved, "restore": "all"}), WAIT)
        assert bad.value.code == -32602
