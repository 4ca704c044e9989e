"""bridge/acp_mapping.py: prompts from ACP content blocks, tool kinds, titles and stop reasons."""

from __future__ import annotations

from acp import schema

from bridge.acp_mapping import PromptMapper, prompt_text, stop_reason_of, tool_kind, tool_title


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
