"""Approvals and modes over ACP, end to end through the official Python SDK's client, against the
real pi 1.6.0 and the scripted model (contract, turn 3, "ACP front").

ACP sessions start in `ask`: every edit, write or shell command comes to the client as
`session/request_permission`, and each test sets how the client answers. "Nothing ran" is seen
on the workspace: `toolcompound` runs `echo hi && touch compound.txt`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp import RequestError, schema

from bridge.scripted_model import EDIT_FILE, EDIT_NEW, EDIT_OLD, EDIT_ORIGINAL
from tests.support.acp import AcpRecorder, acp_bridge, choose, new_session, prompt, text_of
from tests.support.env import WAIT, agent_dir_with_extension, requires_pi
from tests.support.leaks import no_run_processes, run_processes

pytestmark = [requires_pi]

COMPOUND_FILE = "compound.txt"
ALL_KINDS = ["allow_once", "allow_always", "allow_always", "reject_once", "reject_always"]


def _tool_ends(recorder: AcpRecorder, session_id: str) -> list[Any]:
    return [
        u
        for u in recorder.of(session_id)
        if u.session_update == "tool_call_update" and u.status in ("completed", "failed")
    ]


def _choosing(name: str) -> Any:
    """Answer a select dialog by choosing the option shown as `name`."""

    async def answer(request: schema.RequestPermissionRequest) -> Any:
        option = next(o for o in request.options if o.name == name)
        return {"outcome": {"outcome": "selected", "optionId": option.option_id}}

    return answer


def _allow_once_released(release: asyncio.Event) -> Any:
    """Answer allow once, but only once `release` is set (a client that answers late)."""

    async def answer(request: schema.RequestPermissionRequest) -> Any:
        await release.wait()
        return {"outcome": {"outcome": "selected", "optionId": request.options[0].option_id}}

    return answer


async def _held_at_its_request(
    conn: Any, recorder: AcpRecorder, cwd: Path, release: asyncio.Event
) -> tuple[str, asyncio.Task[Any]]:
    """A `toolcompound` prompt whose client holds its permission request until `release`."""
    recorder.answer = _allow_once_released(release)
    session_id = await new_session(conn, cwd, "toolcompound")
    running = asyncio.create_task(prompt(conn, session_id, "run it"))
    await recorder.wait_for_request()
    return session_id, running


async def _late_allow_runs_nothing(
    conn: Any, recorder: AcpRecorder, session_id: str, cwd: Path, release: asyncio.Event
) -> None:
    """The held request's "allow" goes out late: nothing runs, and the session serves a prompt."""
    release.set()
    recorder.answer = choose("reject_once")
    await conn.set_config_option(config_id="model", session_id=session_id, value="fake/text")
    assert (await prompt(conn, session_id, "still there?")).stop_reason == "end_turn", "the session goes on"
    assert not (cwd / COMPOUND_FILE).exists(), "the late allow ran nothing"


def _option(options: list[Any] | None, option_id: str) -> Any:
    """The config option `option_id` (the SDK may wrap each in a root model)."""
    found = [getattr(o, "root", o) for o in options or []]
    return next(o for o in found if o.id == option_id)


def _answering(result: Any) -> Any:
    async def answer(request: schema.RequestPermissionRequest) -> Any:
        return result

    return answer


async def test_acp_reject_runs_nothing_and_the_prompt_ends_its_turn(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        recorder.answer = choose("reject_once")
        session_id = await new_session(conn, tmp_path, "toolcompound")
        answer = await prompt(conn, session_id, "run it")
        assert answer.stop_reason == "end_turn", "the model is told and answers"
        [request] = recorder.permission_requests
        assert request.session_id == session_id
        assert request.tool_call.title == "echo hi && touch compound.txt"
        assert request.tool_call.kind == "execute"
        assert request.tool_call.raw_input == {"command": "echo hi && touch compound.txt"}
        assert [o.kind for o in request.options] == ["allow_once", "reject_once"], "a compound: no rule"
        [end] = _tool_ends(recorder, session_id)
        assert end.status == "failed" and end.tool_call_id == request.tool_call.tool_call_id
        assert not (tmp_path / COMPOUND_FILE).exists(), "nothing ran"


async def test_acp_allow_runs_the_command_with_every_option_offered(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "tool")
        assert (await prompt(conn, session_id, "run echo")).stop_reason == "end_turn"
        [request] = recorder.permission_requests
        assert [o.kind for o in request.options] == ALL_KINDS
        assert len({o.option_id for o in request.options}) == 5 and all(o.name for o in request.options)
        exact, prefix = (o for o in request.options if o.kind == "allow_always")
        assert exact.name == "Always allow `echo hi` in this workspace"
        assert exact.field_meta["piBridge"]["rule"]["match"] == {"command": ["echo", "hi"]}, (
            "as wide as its label"
        )
        assert prefix.name == "Always allow `echo hi *` in this workspace"
        assert prefix.field_meta["piBridge"]["rule"]["match"] == {"commandPrefix": ["echo", "hi"]}
        [end] = _tool_ends(recorder, session_id)
        assert end.status == "completed" and end.content[-1].content.text.strip() == "hi"


async def test_acp_allow_always_answers_the_next_identical_call_but_not_a_compound(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        recorder.answer = choose("allow_always")
        session_id = await new_session(conn, tmp_path, "tool")
        await prompt(conn, session_id, "run echo")
        await prompt(conn, session_id, "run echo again")
        assert len(recorder.permission_requests) == 1, "the second `echo hi` was allowed by the rule"
        assert [u.status for u in _tool_ends(recorder, session_id)] == ["completed", "completed"]
        recorder.answer = choose("reject_once")
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/toolcompound")
        await prompt(conn, session_id, "run the compound")
        assert len(recorder.permission_requests) == 2, "a compound starting with `echo hi` still asks"
        assert not (tmp_path / COMPOUND_FILE).exists()


async def test_acp_an_edit_request_carries_its_diff(pi_agent_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL)
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        recorder.answer = choose("reject_once")
        session_id = await new_session(conn, tmp_path, "edit")
        await prompt(conn, session_id, "edit the notes")
        [request] = recorder.permission_requests
        assert request.tool_call.kind == "edit"
        [diff] = [c for c in request.tool_call.content or [] if isinstance(c, schema.FileEditToolCallContent)]
        assert diff.path == str(target)
        assert (diff.old_text, diff.new_text) == (EDIT_ORIGINAL, EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW))
        assert target.read_text() == EDIT_ORIGINAL, "rejected: the file is as it was"


async def test_acp_modes_in_new_session_and_plan_refuses_an_edit_without_asking(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL)
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[]), WAIT)
        session_id = session.session_id
        assert session.modes is not None and session.modes.current_mode_id == "ask"
        assert [m.id for m in session.modes.available_modes] == ["ask", "auto-edit", "plan", "full"]
        assert all(m.name and m.description for m in session.modes.available_modes)
        mode_option = _option(session.config_options, "mode")
        assert (mode_option.category, mode_option.current_value) == ("mode", "ask")
        await asyncio.wait_for(conn.set_session_mode(mode_id="plan", session_id=session_id), WAIT)
        await recorder.wait_for(
            lambda u: u.session_update == "current_mode_update" and u.current_mode_id == "plan"
        )
        synced = await recorder.wait_for(lambda u: u.session_update == "config_option_update")
        assert _option(synced.config_options, "mode").current_value == "plan"
        await conn.set_config_option(config_id="model", session_id=session_id, value="fake/edit")
        assert (await prompt(conn, session_id, "edit the notes")).stop_reason == "end_turn"
        assert recorder.permission_requests == [], "plan refuses without asking"
        assert [u.status for u in _tool_ends(recorder, session_id)] == ["failed"]
        assert target.read_text() == EDIT_ORIGINAL


async def test_acp_the_mode_config_option_sets_the_mode_and_tells_it(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id = await new_session(conn, tmp_path, "toolcompound")
        answer = await conn.set_config_option(config_id="mode", session_id=session_id, value="full")
        assert _option(answer.config_options, "mode").current_value == "full"
        await recorder.wait_for(
            lambda u: u.session_update == "current_mode_update" and u.current_mode_id == "full"
        )
        await prompt(conn, session_id, "run it")
        assert recorder.permission_requests == [], "full runs without asking"
        assert (tmp_path / COMPOUND_FILE).exists()
        with pytest.raises(Exception, match="is not one of"):
            await conn.set_session_mode(mode_id="yolo", session_id=session_id)


async def test_acp_default_mode_from_the_command_line_or_initialize_meta(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path, args=("--default-mode", "full")) as (conn, recorder, _):
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[]), WAIT)
        assert session.modes is not None and session.modes.current_mode_id == "full"
    async with acp_bridge(pi_agent_dir, tmp_path, meta={"piBridge": {"defaultMode": "plan"}}) as (conn, _, _):
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[]), WAIT)
        assert session.modes is not None and session.modes.current_mode_id == "plan"


async def test_acp_session_cancel_settles_the_pending_request_and_a_late_allow_runs_nothing(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    release = asyncio.Event()
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        session_id, running = await _held_at_its_request(conn, recorder, tmp_path, release)
        await conn.cancel(session_id=session_id)
        assert (await asyncio.wait_for(running, WAIT)).stop_reason == "cancelled"
        await _late_allow_runs_nothing(conn, recorder, session_id, tmp_path, release)
        await asyncio.wait_for(conn.close_session(session_id=session_id), WAIT)
        no_run_processes(timeout=3, where="after session/cancel while asking")


@pytest.mark.parametrize(
    "garbage",
    [
        {"outcome": {"outcome": "selected", "optionId": "made-up"}},
        {"outcome": {"outcome": "maybe"}},
        {"optionId": "allow-once"},
        ["allow-once"],
        None,
    ],
)
async def test_acp_a_client_answering_garbage_is_no_answer(
    pi_agent_dir: Path, tmp_path: Path, garbage: Any
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        recorder.answer = _answering(garbage)
        session_id = await new_session(conn, tmp_path, "toolcompound")
        assert (await prompt(conn, session_id, "run it")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 1
        assert [u.status for u in _tool_ends(recorder, session_id)] == ["failed"]
        assert not (tmp_path / COMPOUND_FILE).exists()


DIALOGS = """
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return undefined;
    ctx.ui.notify("choosing before bash", "info");
    const way = await ctx.ui.select("Which way?", ["skip it", "run it"]);
    if (way !== "run it") return { block: true, reason: "the user chose to skip it" };
    const why = await ctx.ui.input("Why?", "a reason");
    if (why !== "because") return { block: true, reason: "no reason given" };
    return undefined;
  });
}
"""


@pytest.fixture
def dialog_agent_dir(pi_agent_dir: Path, tmp_path: Path) -> Path:
    """The scripted model's agent dir plus an extension that notifies, asks which way, and why."""
    return agent_dir_with_extension(pi_agent_dir, tmp_path / "pi-agent", "dialogs.ts", DIALOGS)


async def test_acp_dialogs_select_by_permission_input_by_elicitation_notify_as_notice(
    dialog_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    capabilities = schema.ClientCapabilities(elicitation=schema.ElicitationCapabilities(form={}))
    async with acp_bridge(
        dialog_agent_dir, workspace, args=("--default-mode", "full"), capabilities=capabilities
    ) as (conn, recorder, _):
        recorder.elicit = lambda message, mode: {"action": "accept", "content": {"value": "because"}}
        recorder.answer = _choosing("run it")
        session_id = await new_session(conn, workspace, "toolcompound")
        assert (await prompt(conn, session_id, "run it")).stop_reason == "end_turn"
        [select] = recorder.permission_requests
        assert select.tool_call.title == "Which way?"
        assert [o.name for o in select.options] == ["skip it", "run it"]
        [(message, mode)] = recorder.elicitations
        assert message and mode.requested_schema.required == ["value"]
        assert (workspace / COMPOUND_FILE).exists(), "chosen and given a reason: it ran"
        assert "choosing before bash" in text_of(recorder.of(session_id)), "the notify is shown"


async def test_acp_input_without_elicitation_is_cancelled_at_once(
    dialog_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    async with acp_bridge(dialog_agent_dir, workspace, args=("--default-mode", "full")) as (
        conn,
        recorder,
        _,
    ):
        recorder.answer = _choosing("run it")
        session_id = await new_session(conn, workspace, "toolcompound")
        assert (await prompt(conn, session_id, "run it")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 1 and recorder.elicitations == []
        assert not (workspace / COMPOUND_FILE).exists(), "no reason could be given: blocked"
        assert "this client cannot answer" in text_of(recorder.of(session_id))


async def test_acp_pi_killed_while_the_client_is_asked_settles_the_request_and_the_session_goes_on(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    release = asyncio.Event()
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, bridge):
        session_id, running = await _held_at_its_request(conn, recorder, tmp_path, release)
        [pi] = [p for p in psutil.Process(bridge.pid).children() if p.pid in {q.pid for q in run_processes()}]
        pi.kill()
        with pytest.raises(RequestError) as failure:
            await asyncio.wait_for(running, WAIT)
        assert failure.value.code == -32000 and failure.value.data["kind"] == "process"
        await _late_allow_runs_nothing(conn, recorder, session_id, tmp_path, release)


async def test_acp_the_request_carries_the_whole_command_and_a_title_keeps_its_tail(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    command = "echo " + "harmless-looking-words " * 12 + "; touch tail-ran.txt"
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        recorder.answer = choose("reject_once")
        session_id = await new_session(conn, tmp_path, "shell")
        assert (await prompt(conn, session_id, command)).stop_reason == "end_turn"
        [request] = recorder.permission_requests
        call = request.tool_call
        assert call.raw_input == {"command": command}
        texts = [c.content.text for c in call.content or [] if isinstance(c, schema.ContentToolCallContent)]
        assert texts == [command], "the whole command, never cut, as content"
        assert len(call.title) <= 200 and " … " in call.title and call.title.endswith("touch tail-ran.txt")
        assert not (tmp_path / "tail-ran.txt").exists()
