"""bridge/agents/pi/live.py: what a cancel writes to pi, judged from the bytes written."""

from __future__ import annotations

from typing import Any

import orjson

from bridge.agents.pi.live import PiRpc


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write_now(self, line: bytes) -> None:
        self.lines.append(orjson.loads(line))


class _Child:
    pid = 4242

    def __init__(self) -> None:
        self.stdin = _Stdin()


def _pi() -> tuple[PiRpc, _Stdin]:
    child = _Child()
    return PiRpc(child), child.stdin  # type: ignore[arg-type]  # only its stdin is used


def _read(pi: PiRpc, *records: dict[str, Any]) -> None:
    pi._dispatch([orjson.dumps(record) for record in records])


async def test_a_cancel_writes_no_clear_queue_while_pi_s_queue_is_empty() -> None:
    """pi handles a `clear_queue` before the abort written after it: with nothing queued (pi says
    each change of its queue), the abort goes alone."""
    pi, stdin = _pi()
    assert pi.send_clear_queue_now() is None
    _read(pi, {"type": "queue_update", "steering": ["go left"], "followUp": []})
    _read(pi, {"type": "queue_update", "steering": [], "followUp": []})  # taken into the turn
    assert pi.send_clear_queue_now() is None
    pi.send_abort_now()
    assert [line["type"] for line in stdin.lines] == ["abort"]


async def test_a_cancel_clears_pi_s_queue_while_it_holds_a_message_or_one_may_be_on_its_way() -> None:
    pi, stdin = _pi()
    _read(pi, {"type": "queue_update", "steering": [], "followUp": ["after this"]})
    assert pi.send_clear_queue_now() is not None
    _read(pi, {"type": "queue_update", "steering": [], "followUp": []})
    steer = pi.send_now({"type": "steer", "message": "go right"})  # not answered yet
    assert pi.send_clear_queue_now() is not None
    _read(pi, {"type": "queue_update", "steering": ["go right"], "followUp": []})
    _read(pi, {"type": "response", "id": steer.command_id, "command": "steer", "success": True})
    assert pi.send_clear_queue_now() is not None
    _read(pi, {"type": "queue_update", "steering": [], "followUp": []})
    assert pi.send_clear_queue_now() is None
    pi._dispatch([b'{"type":"queue_update","steering":["cut sh'])  # one it cannot read: assume so
    assert pi.send_clear_queue_now() is not None
    assert [line["type"] for line in stdin.lines] == [
        "clear_queue",
        "steer",
        "clear_queue",
        "clear_queue",
        "clear_queue",
    ]
