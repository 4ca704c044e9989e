"""The mapper decodes only what it reads; a batch carries one cumulative tool.update per call."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bridge.agents.pi import mapper as pi_mapper
from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.engines.output import coalesce


def test_lines_whose_body_is_never_read_are_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    big = [{"role": "user", "content": [{"type": "text", "text": "p" * 100_000}]}]
    lines = [
        orjson.dumps({"type": "message_start", "message": {"role": "toolResult", "content": big}}),
        orjson.dumps({"type": "message_end", "message": {"role": "user", "content": big}}),
        orjson.dumps({"type": "turn_end", "message": {"role": "assistant"}, "toolResults": big}),
        orjson.dumps({"type": "agent_settled", "aborted": False}),
        orjson.dumps({"type": "agent_end", "messages": big}),
    ]
    decoded: list[int] = []
    real_loads = orjson.loads

    def counting_loads(data: Any) -> Any:
        decoded.append(len(data))
        return real_loads(data)

    monkeypatch.setattr(pi_mapper.orjson, "loads", counting_loads)
    mapper = PiEventMapper(RunOptions(prompt="p", cwd="/"))
    out = [message for line in lines for message in mapper.feed(line)]
    assert [m.type for m in out] == ["terminal.completed"]
    assert decoded == [], f"decoded {len(decoded)} lines nobody reads"


def update(call: str, output: str) -> Out:
    return Out("tool.update", {"toolCallId": call, "output": output})


def test_only_the_last_cumulative_tool_update_per_call_is_sent_per_batch() -> None:
    batch = [
        update("a", "1"),
        Out("assistant", {"text": "x"}),
        update("a", "12"),
        update("b", "z"),
        update("a", "123"),
        Out("tool.completed", {"toolCallId": "a", "name": "bash", "output": "123"}),
    ]
    assert [(m.type, m.content.get("output", m.content.get("text"))) for m in coalesce(batch)] == [
        ("assistant", "x"),
        ("tool.update", "z"),
        ("tool.update", "123"),
        ("tool.completed", "123"),
    ]
