"""The extension names other ACP agents share (claude-agent-acp, codex-acp), through the official
SDK's client on real pi and the scripted model: `_session/steering` steers the running prompt,
`_session/rewind` rewinds to a checkpoint (judged from the disk), and initialize advertises both."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from acp import RequestError

from bridge.scripted_model import ScriptedModelServer
from tests.support.acp import acp_bridge, new_session, prompt
from tests.support.env import WAIT, requires_pi

pytestmark = [requires_pi]


async def test_session_steering_steers_the_running_prompt(
    pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    async with acp_bridge(pi_agent_dir, tmp_path) as (conn, recorder, _):
        initialized = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        assert initialized.field_meta is not None and initialized.field_meta["steering"] == {
            "supported": True
        }
        assert {"_session/steering", "_session/rewind"} <= set(
            initialized.field_meta["piBridge"]["extMethods"]
        )
        session_id = await new_session(conn, tmp_path, "toolsteer")
        words = {"sessionId": session_id, "prompt": [{"type": "text", "text": "steer-8a2 now"}]}
        idle = await asyncio.wait_for(conn.ext_method("session/steering", words), WAIT)
        assert idle == {"outcome": "promptRequired", "reason": "noRunningTurn"}
        running = asyncio.ensure_future(prompt(conn, session_id, "sleep"))
        await recorder.wait_for(lambda u: u.session_update == "tool_call")
        steered = await asyncio.wait_for(conn.ext_method("session/steering", words), WAIT)
        assert steered == {"outcome": "injected"}
        assert (await asyncio.wait_for(running, WAIT)).stop_reason == "end_turn"
        steer = await recorder.wait_for(lambda u: u.session_update == "user_message_chunk")
        assert steer.content.text == "steer-8a2 now"
        # The model was sent it, within the same prompt.
        assert any("steer-8a2 now" in json.dumps(r["body"]) for r in scripted_model.requests if r["body"])
        with pytest.raises(RequestError) as bad:
            await asyncio.wait_for(conn.ext_method("session/steering", {"sessionId": session_id}), WAIT)
        assert bad.value.code == -32602


async def test_session_rewind_restores_the_workspace_to_a_checkpoint(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    full = {"piBridge": {"defaultMode": "full"}}
    async with acp_bridge(pi_agent_dir, workspace, meta=full) as (conn, _, _):
        session_id = await new_session(conn, workspace, "shell")
        await prompt(conn, session_id, "echo a > first.txt", timeout=WAIT * 2)
        await prompt(conn, session_id, "echo b > second.txt", timeout=WAIT * 2)
        async with asyncio.timeout(WAIT):  # each turn's record is written just after its answer
            while (
                len(
                    (points := await conn.ext_method("pi/rewind_points", {"sessionId": session_id}))[
                        "checkpoints"
                    ]
                )
                < 2
            ):
                await asyncio.sleep(0.05)
        second = points["checkpoints"][1]["checkpointId"]
        wanted = {"sessionId": session_id, "checkpointId": second, "restore": "files"}
        rewound = await asyncio.wait_for(conn.ext_method("session/rewind", wanted), WAIT)
        assert rewound["rewound"] is True and rewound["restored"] == ["second.txt"]
    assert (workspace / "first.txt").read_text() == "a\n"
    assert not (workspace / "second.txt").exists()
