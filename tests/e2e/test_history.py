"""pi/sessions and pi/session with the real pi: a conversation's history matches what was streamed."""

from __future__ import annotations

from typing import Any

import pytest
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.lsp import messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


def as_history(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What pi/session should show of one streamed run: its assistant text whole per message
    (adjacent deltas joined), thoughts and tool calls with their results; no session, update or
    terminal messages (and no diff, which only a live run can take from the file)."""
    shown: list[dict[str, Any]] = []
    for message in stream:
        kind, content = message["type"], dict(message["content"])
        if kind == "assistant" and shown and shown[-1]["type"] == "assistant":
            shown[-1]["content"] = {"text": shown[-1]["content"]["text"] + content["text"]}
        elif kind in ("assistant", "assistant.thought", "tool.call", "tool.completed", "tool.failed"):
            content.pop("diff", None)
            shown.append({"type": kind, "content": content})
    return shown


async def run(client: LanguageClient, **params: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = await request(client, "pi/run", {"provider": "fake", **params})
    stream = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(stream)
    assert result["status"] == "completed", result
    return result, stream


async def test_history_of_a_two_run_conversation_matches_what_was_streamed(
    real_bridge: LanguageClient, tmp_path
) -> None:
    cwd = str(tmp_path)
    first, first_stream = await run(real_bridge, prompt="Run echo hi please", model="tool", cwd=cwd)
    session_id = first["sessionId"]
    second, second_stream = await run(
        real_bridge, prompt="And now think", model="thinking", cwd=cwd, sessionId=session_id
    )
    assert second["sessionId"] == session_id

    listing = await request(real_bridge, "pi/sessions", {"cwd": cwd})
    (summary,) = listing["sessions"]
    assert summary["sessionId"] == session_id and summary["cwd"] == cwd
    # the rpc engine (the default) keeps the conversation's pi live after its runs
    assert summary["title"] == "Run echo hi please" and summary["live"] is True
    # system, and per run: user, assistant, (tool result, assistant)
    assert summary["messageCount"] == 7
    assert summary["createdAt"] <= summary["updatedAt"]

    history = await request(real_bridge, "pi/session", {"sessionId": session_id})
    assert history["found"] is True and history["sessionId"] == session_id and history["cwd"] == cwd
    assert history["title"] == "Run echo hi please"
    assert [turn["prompt"] for turn in history["turns"]] == ["Run echo hi please", "And now think"]
    assert history["turns"][0]["messages"] == as_history(first_stream)
    assert history["turns"][1]["messages"] == as_history(second_stream)
    assert [m["type"] for m in history["turns"][0]["messages"]] == [
        "assistant", "tool.call", "tool.completed", "assistant"
    ]  # fmt: skip
    assert [m["type"] for m in history["turns"][1]["messages"]] == ["assistant", "assistant.thought"]


async def test_unknown_session_is_found_false(real_bridge: LanguageClient) -> None:
    answer = await request(real_bridge, "pi/session", {"sessionId": "no-such-session"})
    assert answer == {"found": False, "sessionId": "no-such-session"}


async def test_a_cwd_without_sessions_lists_none(real_bridge: LanguageClient, tmp_path) -> None:
    assert await request(real_bridge, "pi/sessions", {"cwd": str(tmp_path), "limit": 5}) == {"sessions": []}


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("pi/sessions", {"limit": 0}, "limit"),
        ("pi/sessions", {"limit": "5"}, "limit"),
        ("pi/sessions", {"cwd": ""}, "cwd"),
        ("pi/sessions", {"cwd": "relative/dir"}, "cwd"),
        ("pi/sessions", {"folder": "/tmp"}, "folder"),
        ("pi/session", {}, "sessionId"),
        ("pi/session", {"sessionId": ""}, "sessionId"),
        ("pi/session", {"sessionId": "x", "turns": 3}, "turns"),
    ],
)
async def test_bad_history_params_are_invalid_params_naming_the_field(
    real_bridge: LanguageClient, method: str, params: dict[str, Any], field: str
) -> None:
    with pytest.raises(JsonRpcInvalidParams) as caught:
        await request(real_bridge, method, params)
    assert field in str(caught.value)
