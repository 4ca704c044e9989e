"""Assertions on a run's message stream: the contract's invariants."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def assert_stream_invariants(messages: list[dict[str, Any]]) -> None:
    """The contract's invariants for one run's messages."""
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), "seq must be gap-free"
    by_attempt: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        if message["type"] != "run.retrying":
            by_attempt[message["attempt"]].append(message)
    for attempt, items in by_attempt.items():
        terminals = [m for m in items if m["type"].startswith("terminal.")]
        assert len(terminals) == 1, f"attempt {attempt} has {len(terminals)} terminal messages"
        assert items[-1]["type"].startswith("terminal."), f"attempt {attempt} does not end with its terminal"
        open_tools: set[str] = set()
        for message in items:
            kind = message["type"]
            if kind == "tool.call":
                open_tools.add(message["content"]["toolCallId"])
            elif kind in ("tool.completed", "tool.failed"):
                open_tools.discard(message["content"]["toolCallId"])
            elif kind == "assistant.thought" and not message["content"].get("live"):
                assert not open_tools, "a thought arrived between a tool.call and its close"
        assert not open_tools, f"tool calls left open: {open_tools}"
        text = "".join(m["content"]["text"] for m in items if m["type"] == "assistant")
        assert terminals[0]["content"]["text"] == text, "deltas must concatenate to the terminal text"
