"""The agent's hands through the editor (issue 38), with the official ACP SDK's client: a client
that declares `fs` gets pi's reads and writes (`fs/read_text_file`, `fs/write_text_file`), one
that declares `terminal` runs pi's bash (`terminal/create`), on real pi and the scripted model.
A client that declares none: everything as before. Judged from the disk, from the requests the
client got and from what the scripted model was sent."""

from __future__ import annotations

import asyncio
import difflib
import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp import schema

from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
from tests.support.acp import AcpRecorder, acp_bridge, new_session, prompt, text_of
from tests.support.acp_editor import EditorRecorder
from tests.support.env import WAIT, requires_pi

pytestmark = [requires_pi]


def _told(model: ScriptedModelServer, tag: str) -> str:
    """Every tool result the scripted model was sent in requests that carry `tag`."""
    bodies = [json.dumps(r["body"]) for r in model.requests if r["body"] and tag in json.dumps(r["body"])]
    return "\n".join(bodies)


def _script(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps([[name, arguments] for name, arguments in calls])


def _diffs(editor: EditorRecorder, session_id: str) -> list[tuple[str | None, str]]:
    """The (oldText, newText) of every diff the client was sent with a completed tool call."""
    return [
        (c.old_text, c.new_text)
        for u in editor.of(session_id)
        if u.session_update == "tool_call_update" and u.status == "completed"
        for c in u.content or []
        if c.type == "diff"
    ]


def _added_removed(old: str | None, new: str) -> tuple[list[str], list[str]]:
    """The lines a diff adds and removes, as a review counts them (+N -M)."""
    changes = [
        line for line in difflib.ndiff((old or "").splitlines(), new.splitlines()) if line[:2] in ("+ ", "- ")
    ]
    return [line[2:] for line in changes if line[0] == "+"], [line[2:] for line in changes if line[0] == "-"]


async def test_a_write_goes_through_fs_write_text_file_and_none_lands_on_disk(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "kept.txt").write_text("the disk's text\n")
    editor = EditorRecorder()
    capabilities = editor.capabilities()
    async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor) as (
        conn,
        _,
        _,
    ):
        session_id = await new_session(conn, workspace, "script")
        script = _script(
            ("write", {"path": "new.txt", "content": "written-ed38\n"}),
            ("write", {"path": "kept.txt", "content": "replaced-ed38\n"}),
        )
        answer = await prompt(conn, session_id, script, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        diffs = [
            (c.old_text, c.new_text)
            for u in editor.of(session_id)
            if u.session_update == "tool_call_update" and u.status == "completed"
            for c in u.content or []
            if c.type == "diff"
        ]
    # The review's diffs: the text before as the editor held it, the text the editor was sent.
    assert diffs == [(None, "written-ed38\n"), ("the disk's text\n", "replaced-ed38\n")]
    assert editor.writes == [
        (str(workspace / "new.txt"), "written-ed38\n"),
        (str(workspace / "kept.txt"), "replaced-ed38\n"),
    ]
    assert not (workspace / "new.txt").exists()
    assert (workspace / "kept.txt").read_text() == "the disk's text\n"


async def test_a_read_and_an_edit_see_the_unsaved_buffer_the_client_holds(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    disk, buffer = "saved-7f3 on disk\n", "unsaved-7f3 in the buffer\n"
    (workspace / "notes.txt").write_text(disk)
    editor = EditorRecorder()
    editor.buffers[str(workspace / "notes.txt")] = buffer
    capabilities = editor.capabilities()
    async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor) as (
        conn,
        _,
        _,
    ):
        session_id = await new_session(conn, workspace, "script")
        edit = {"path": "notes.txt", "edits": [{"oldText": "unsaved-7f3", "newText": "edited-7f3"}]}
        script = _script(("read", {"path": "notes.txt"}), ("edit", edit))
        answer = await prompt(conn, session_id, script, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        told = text_of(editor.of(session_id))
        diffs = _diffs(editor, session_id)
    assert "unsaved-7f3 in the buffer" in told and "saved-7f3 on disk" not in told
    # The review's diff is of the buffer before and after, not of the disk (never written).
    assert diffs == [(buffer, "edited-7f3 in the buffer\n")]
    assert _added_removed(*diffs[0]) == (["edited-7f3 in the buffer"], ["unsaved-7f3 in the buffer"])
    assert "unsaved-7f3 in the buffer" in _told(scripted_model, "edited-7f3")
    assert editor.writes == [(str(workspace / "notes.txt"), "edited-7f3 in the buffer\n")]
    assert (workspace / "notes.txt").read_text() == disk
    assert str(workspace / "notes.txt") in editor.reads


async def test_the_path_policy_judges_before_the_client_is_asked(pi_agent_dir: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    editor = EditorRecorder()
    capabilities = editor.capabilities()
    async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor) as (
        conn,
        _,
        _,
    ):
        session_id = await new_session(conn, workspace, "script")
        script = _script(
            ("read", {"path": "/proc/self/environ"}), ("write", {"path": "/proc/self/x", "content": "x"})
        )
        answer = await prompt(conn, session_id, script, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        told = text_of(editor.of(session_id))
    assert editor.reads == [] and editor.writes == []
    assert told.count("hidden from the agent's tools") == 2


async def test_a_client_that_declares_no_fs_reads_and_writes_the_disk_as_before(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("saved-9c1 on disk\n")
    plain = AcpRecorder()
    async with acp_bridge(pi_agent_dir, workspace, recorder=plain) as (conn, _, _):
        session_id = await new_session(conn, workspace, "script")
        script = _script(
            ("read", {"path": "notes.txt"}),
            ("write", {"path": "new.txt", "content": "on-disk-9c1\n"}),
            ("bash", {"command": "echo ran-9c1 > ran.txt; echo shell-9c1"}),
        )
        answer = await prompt(conn, session_id, script, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        told = text_of(plain.of(session_id))
    # pi read, wrote and ran the command itself: the client was asked for none of it.
    assert "saved-9c1 on disk" in told and "shell-9c1" in told
    assert (workspace / "new.txt").read_text() == "on-disk-9c1\n"
    assert (workspace / "ran.txt").read_text() == "ran-9c1\n"


def _terminal_of(update: Any) -> str | None:
    """The client terminal a tool_call_update shows, if any."""
    if update.session_update != "tool_call_update":
        return None
    return next((c.terminal_id for c in update.content or [] if c.type == "terminal"), None)


def _raw_output(update: Any) -> str:
    """The output an in-progress tool_call_update says the agent was streamed so far."""
    if update.session_update != "tool_call_update" or update.status != "in_progress":
        return ""
    raw = update.raw_output
    return str(raw.get("output", "")) if isinstance(raw, dict) else ""


async def test_a_command_runs_in_the_client_terminal_its_output_streamed(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    editor = EditorRecorder()
    capabilities = editor.capabilities()
    # The command waits for the test: its first line must reach the client while it runs.
    command = "echo first-3d1; while [ ! -e go ]; do sleep 0.05; done; echo second-3d1; exit 4"
    async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor) as (
        conn,
        _,
        _,
    ):
        session_id = await new_session(conn, workspace, "shell")
        running = asyncio.ensure_future(prompt(conn, session_id, command, timeout=WAIT * 2))
        # The client's terminal is shown in the call, and the output pi was streamed so far is
        # the update's rawOutput, while the command still waits.
        await editor.wait_for(lambda u: _terminal_of(u) == "term-1")
        await editor.wait_for(lambda u: "first-3d1" in _raw_output(u))
        assert not any("second-3d1" in _raw_output(u) for u in editor.of(session_id))
        (workspace / "go").touch()
        answer = await running
        assert answer.stop_reason == "end_turn"
        ended = [u for u in editor.of(session_id) if u.session_update == "tool_call_update"]
        assert ended[-1].status in ("completed", "failed") and _terminal_of(ended[-1]) == "term-1"
    (terminal,) = editor.terminals.values()
    # Unsandboxed, the command runs without the client's secret variables (env --unset=...).
    assert terminal.command == "env" and terminal.args[-3:] == ["bash", "-c", command], terminal
    assert all(arg.startswith("--unset=") for arg in terminal.args[:-3]), terminal.args
    assert terminal.cwd == str(workspace) and terminal.process.returncode == 4
    assert editor.called("terminal/release") == ["term-1"]
    told = _told(scripted_model, "second-3d1")
    assert "first-3d1" in told and "Command exited with code 4" in told


def _running(marker: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


async def test_a_cancel_kills_the_client_terminal_and_leaves_nothing_in_proc(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    editor = EditorRecorder()
    capabilities = editor.capabilities()
    command = "echo started-5b8; sleep 3581; echo never-5b8"
    try:
        async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor) as (
            conn,
            _,
            _,
        ):
            session_id = await new_session(conn, workspace, "shell")
            running = asyncio.ensure_future(prompt(conn, session_id, command, timeout=WAIT * 2))
            await editor.wait_for(lambda u: "started-5b8" in _raw_output(u))
            assert _running("sleep 3581")
            await conn.cancel(session_id=session_id)
            answer = await running
            assert answer.stop_reason == "cancelled"
            assert editor.called("terminal/kill") == ["term-1"]
            assert editor.called("terminal/release") == ["term-1"]
        async with asyncio.timeout(WAIT):
            while _running("sleep 3581"):
                await asyncio.sleep(0.05)
        (terminal,) = editor.terminals.values()
        assert terminal.killed and terminal.process.returncode is not None
        assert not psutil.pid_exists(terminal.process.pid)
    finally:
        await editor.close()


@pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}")
async def test_a_sandboxed_command_in_the_client_terminal_cannot_write_outside(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    editor = EditorRecorder()
    capabilities = editor.capabilities()
    meta = {"piBridge": {"sandbox": {"mode": "workspace-write"}}}
    command = f"echo in > inside.txt; echo out > {outside}; echo tried-2c4"
    async with acp_bridge(pi_agent_dir, workspace, capabilities=capabilities, recorder=editor, meta=meta) as (
        conn,
        _,
        _,
    ):
        session_id = await new_session(conn, workspace, "shell")
        answer = await prompt(conn, session_id, command, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
    (terminal,) = editor.terminals.values()
    assert "bwrap" in terminal.args[-1] and terminal.process.returncode == 0
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not outside.exists()


async def test_a_client_without_terminal_leaves_the_command_to_pi(pi_agent_dir: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    editor = EditorRecorder()
    fs_only = schema.ClientCapabilities(fs=schema.FileSystemCapabilities(read_text_file=True))
    async with acp_bridge(pi_agent_dir, workspace, capabilities=fs_only, recorder=editor) as (conn, _, _):
        session_id = await new_session(conn, workspace, "shell")
        answer = await prompt(conn, session_id, "echo local-6e0 > local.txt; echo ran-6e0", timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        told = text_of(editor.of(session_id))
    assert editor.terminal_calls == [] and "ran-6e0" in told
    assert (workspace / "local.txt").read_text() == "local-6e0\n"
