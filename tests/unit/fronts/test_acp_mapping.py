"""bridge/fronts/acp/updates.py: prompts from ACP content blocks, tool kinds, titles and stop reasons."""

from __future__ import annotations

from typing import Any

import pytest
from acp import schema

from bridge.fronts.acp.updates import (
    PromptMapper,
    prompt_text,
    stop_reason_of,
    text_chunk,
    tool_kind,
    tool_title,
)


def test_acp_prompt_quotes_embedded_files_with_their_path_and_names_links() -> None:
    blocks = [
        schema.TextContentBlock(type="text", text="Review this:"),
        schema.EmbeddedResourceContentBlock(
            type="resource",
            resource=schema.TextResourceContents(uri="file:///src/a%20b.py", text="print('hi')\n```x```"),
        ),
        schema.ResourceContentBlock(type="resource_link", uri="file:///src/c.py", name="c.py"),
    ]
    assert prompt_text(blocks) == (
        "Review this:\n\n/src/a b.py:\n````\nprint('hi')\n```x```\n````\n\n[file: /src/c.py]"
    )


def test_acp_tool_kinds_and_titles_follow_pi_tools() -> None:
    assert [tool_kind(n) for n in ("read", "edit", "write", "bash", "grep", "find", "ls", "mcp")] == [
        "read", "edit", "edit", "execute", "search", "search", "search", "other"
    ]  # fmt: skip
    assert tool_title("bash", {"command": "ls -la"}) == "ls -la"
    assert tool_title("read", {"path": "src/x.py"}) == "src/x.py"
    assert tool_title("grep", {"pattern": "TODO", "path": "src"}) == "TODO in src"
    assert tool_title("mystery", {}) == "mystery"


def test_acp_stop_reasons_map_pi_stop_reasons() -> None:
    assert stop_reason_of("stop") == "end_turn"
    assert stop_reason_of("length") == "max_tokens"
    assert stop_reason_of("refusal") == "refusal"
    assert stop_reason_of(None) == "end_turn"


def test_acp_lifecycle_messages_become_no_update() -> None:
    mapper = PromptMapper("/w")
    for kind in ("session.started", "session.resumed", "run.queued"):
        assert mapper.feed({"type": kind, "content": {}}) == []


def _as_the_sdk_sends(session_id: str, update: Any) -> dict[str, Any]:
    """An update as a session/update's params, through the SDK's model."""
    model = schema.SessionNotification.model_validate({"sessionId": session_id, "update": update})
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize(
    "text", ["Hello", "", " w0 w1\n", '\u00e9\u2028\U0001f600 \\ " \x00 </x>', "x" * 5000]
)
@pytest.mark.parametrize(
    ("kind", "update"), [("assistant", "agent_message_chunk"), ("assistant.thought", "agent_thought_chunk")]
)
def test_acp_text_chunks_built_by_hand_are_what_the_sdk_model_sends(
    kind: str, update: str, text: str
) -> None:
    wire = PromptMapper("/w").feed({"type": kind, "content": {"text": text}})
    assert wire == [text_chunk(update, text)]  # type: ignore[arg-type]
    assert _as_the_sdk_sends("s-1", wire[0]) == {"sessionId": "s-1", "update": wire[0]}
    model = schema.AgentMessageChunk if update == "agent_message_chunk" else schema.AgentThoughtChunk
    built = model(session_update=update, content=schema.TextContentBlock(type="text", text=text))  # type: ignore[arg-type]
    assert built.model_dump(mode="json", by_alias=True, exclude_none=True) == wire[0]


def test_acp_model_updates_serialize_alone_as_inside_their_notification() -> None:
    mapper = PromptMapper("/w")
    payloads = [
        {"type": "tool.call", "content": {"toolCallId": "t1", "name": "edit", "arguments": {"path": "a.py"}}},
        {"type": "tool.update", "content": {"toolCallId": "t1", "output": "partial"}},
        {
            "type": "tool.completed",
            "content": {
                "toolCallId": "t1",
                "output": "ok",
                "diff": {"path": "a.py", "oldText": "a", "newText": "b"},
            },
        },
        {"type": "run.retrying", "content": {"attempt": 2, "delayMs": 10, "reason": "500"}},
        {"type": "run.steered", "content": {"text": "also this"}},
        {
            "type": "terminal.completed",
            "content": {"contextUsage": {"tokens": 5, "contextWindow": 100}, "sessionCost": 0.5},
        },
    ]
    updates = [u for p in payloads for u in mapper.feed(p)]
    assert len(updates) == len(payloads)
    for update in updates:
        assert not isinstance(update, dict)
        note = schema.SessionNotification(session_id="s-1", update=update)
        alone = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert note.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            "sessionId": "s-1",
            "update": alone,
        }


def test_a_plan_is_acp_s_plan_update_and_a_subagent_s_call_names_its_parent_in_meta() -> None:
    mapper = PromptMapper("/w")
    entries = [
        {"content": "read the code", "status": "completed"},
        {"content": "fix the bug", "status": "in_progress", "priority": "high"},
    ]
    [plan] = mapper.feed({"type": "plan", "content": {"entries": entries}})
    wire = plan.model_dump(by_alias=True, exclude_none=True)
    assert wire == {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "read the code", "status": "completed", "priority": "medium"},
            {"content": "fix the bug", "status": "in_progress", "priority": "high"},
        ],
    }
    call = {
        "toolCallId": "c2",
        "name": "Read",
        "arguments": {"file_path": "/w/a"},
        "parentToolCallId": "task1",
    }
    [start] = mapper.feed({"type": "tool.call", "content": call})
    assert start.model_dump(by_alias=True, exclude_none=True)["_meta"] == {
        "piBridge": {"parentToolCallId": "task1"}
    }
    [plain] = mapper.feed(
        {"type": "tool.call", "content": {**call, "toolCallId": "c3", "parentToolCallId": None}}
    )
    assert "_meta" not in plain.model_dump(by_alias=True, exclude_none=True)
