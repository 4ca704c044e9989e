"""Project trust over ACP, through the official Python SDK's client, on real pi 1.6.0 and the
scripted model: the question comes as `session/request_permission`, once per workspace.

`session/new` opens the conversation's live pi before any prompt, untrusted (no decision yet);
a "trust" answer to the first prompt's question must start a pi with `--approve` on the same
session, so the prompt's template reaches the model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from acp import schema

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import last_user_text_of
from tests.e2e.test_project_trust import TEMPLATE_WORD, project
from tests.support.acp import acp_bridge, choose, new_session, prompt, text_of
from tests.support.env import WAIT, requires_pi

pytestmark = [requires_pi]


def _seen(model: ScriptedModelServer, before: int) -> str | None:
    sent = [r for r in model.requests[before:] if r["body"]]
    return last_user_text_of(sent[-1]["body"]) if sent else None


async def test_acp_asks_once_per_folder_and_only_the_trusted_one_expands_its_template(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    trusted, untrusted = project(tmp_path, "trusted"), project(tmp_path, "untrusted")
    state = {STATE_DIR_ENV: str(tmp_path / "state")}
    async with acp_bridge(pi_agent_dir, tmp_path, extra_env=state) as (conn, recorder, _):
        recorder.answer = choose("allow_always")
        session_id = await new_session(conn, trusted)
        before = len(scripted_model.requests)
        assert (await prompt(conn, session_id, "/greet")).stop_reason == "end_turn"
        seen = _seen(scripted_model, before)
        assert seen is not None and TEMPLATE_WORD in seen, f"the template reached the model: {seen!r}"
        [asked] = recorder.permission_requests
        assert asked.session_id == session_id and asked.tool_call.tool_call_id.startswith("trust-")
        assert ".pi/prompts" in (asked.tool_call.title or "") and asked.tool_call.raw_input == {
            "cwd": str(trusted.resolve()),
            "resources": [".pi/prompts"],
        }
        assert sorted(o.kind for o in asked.options) == sorted(
            ["allow_always", "allow_once", "reject_once", "reject_always"]
        )
        before = len(scripted_model.requests)
        assert (await prompt(conn, session_id, "/greet")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 1, "asked once"
        assert TEMPLATE_WORD in (_seen(scripted_model, before) or "")

        recorder.answer = choose("reject_always")
        other = await new_session(conn, untrusted)
        before = len(scripted_model.requests)
        assert (await prompt(conn, other, "/greet")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 2
        assert _seen(scripted_model, before) == "/greet", "the untrusted folder's template stayed out"

    async with acp_bridge(pi_agent_dir, tmp_path, extra_env=state) as (conn, recorder, _):
        session_id = await new_session(conn, trusted)
        before = len(scripted_model.requests)
        assert (await prompt(conn, session_id, "/greet")).stop_reason == "end_turn"
        assert recorder.permission_requests == [], "a new bridge remembers"
        assert TEMPLATE_WORD in (_seen(scripted_model, before) or "")


async def test_acp_a_garbled_answer_trusts_nothing_and_a_cancel_ends_a_question_never_answered(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    folder = project(tmp_path, "garbled")
    state = {STATE_DIR_ENV: str(tmp_path / "state")}
    async with acp_bridge(pi_agent_dir, tmp_path, extra_env=state) as (conn, recorder, _):

        async def garbled(request: schema.RequestPermissionRequest) -> Any:
            return {"outcome": {"outcome": "selected", "optionId": "trust-everything"}}

        recorder.answer = garbled
        session_id = await new_session(conn, folder)
        before = len(scripted_model.requests)
        assert (await prompt(conn, session_id, "/greet")).stop_reason == "end_turn"
        assert _seen(scripted_model, before) == "/greet", "no answer: not trusted"
        assert "no answer to the project-trust question" in text_of(recorder.of(session_id))

        held = asyncio.Event()

        async def never(request: schema.RequestPermissionRequest) -> Any:
            await held.wait()
            return {"outcome": {"outcome": "selected", "optionId": request.options[0].option_id}}

        recorder.answer = never
        running = asyncio.create_task(prompt(conn, session_id, "/greet"))
        await recorder.wait_for_request(2)
        await conn.cancel(session_id=session_id)
        assert (await asyncio.wait_for(running, WAIT)).stop_reason == "cancelled"
        held.set()  # the late "trust" comes after the cancel settled the question: it decides nothing
        recorder.answer = choose("reject_once")
        assert (await prompt(conn, session_id, "/greet")).stop_reason == "end_turn"
        assert len(recorder.permission_requests) == 3, "nothing was decided: asked again"
