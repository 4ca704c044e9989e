"""`pi/models` over LSP, on real pi with the scripted model: the agent's own model list
(pi's `get_available_models`) and the model the conversation runs now."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from pytest_lsp import LanguageClient

from bridge.scripted_model import SCENARIOS, ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.lsp import request

pytestmark = [requires_pi, pytest.mark.realpi]


async def test_models_lists_the_scripted_model_s_models_and_the_current_one(
    real_bridge: LanguageClient, tmp_path: Path, scripted_model: ScriptedModelServer
) -> None:
    with anyio.fail_after(40):
        listed = await request(real_bridge, "pi/models", {"cwd": str(tmp_path)})
    pairs = {(m["provider"], m["id"]) for m in listed["models"]}
    assert {("fake", s) for s in SCENARIOS} <= pairs
    assert {("fake-anthropic", s) for s in SCENARIOS} <= pairs
    assert sum(1 for m in listed["models"] if m["current"]) <= 1
    session = listed["sessionId"]
    # The conversation runs fake/echo once a prompt named it: that is its current model now.
    with anyio.fail_after(40):
        run = await request(
            real_bridge,
            "pi/run",
            {"prompt": "hi", "provider": "fake", "model": "echo", "cwd": str(tmp_path), "sessionId": session},
        )
    assert run["text"] == "ECHO:hi"
    with anyio.fail_after(40):
        again = await request(real_bridge, "pi/models", {"sessionId": session})
    assert again["sessionId"] == session
    # The scripted model's models are named after their scenarios (the chat's `/demo` lists them).
    assert again["current"] == {"provider": "fake", "id": "echo", "name": SCENARIOS["echo"], "current": True}
    assert [m for m in again["models"] if m["current"]] == [again["current"]]
    assert {(m["provider"], m["id"]) for m in again["models"]} == pairs


async def test_models_of_an_unknown_session_is_an_error(real_bridge: LanguageClient) -> None:
    from pygls.exceptions import JsonRpcException

    with anyio.fail_after(20), pytest.raises(JsonRpcException, match="no session"):
        await request(real_bridge, "pi/models", {"sessionId": "no-such-session"})
