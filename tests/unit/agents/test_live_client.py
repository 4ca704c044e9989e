"""bridge/agents/live_client.py: how a live client waits for its commands' answers."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.agents.live_client import LiveClientBase
from bridge.agents.live_reader import PendingCommand


class _Client(LiveClientBase):
    def _reply_data(self, command: str, response: dict[str, Any]) -> dict[str, Any]:
        return dict(response.get("data") or {})


async def test_an_answered_command_is_read_without_a_trip_round_the_loop() -> None:
    """A cancel reads back the answer of the `clear_queue` it wrote before the abort, which came
    first: that read gives the loop no turn (it would put one more step between pi's abort
    answer and the client's)."""
    client = object.__new__(_Client)
    client._waiting = {"b1": (pending := PendingCommand("clear_queue", "b1"))}
    pending.response = {"data": {"steering": ["later"]}}
    pending.answered.set()
    reading = client.answer(pending)
    with pytest.raises(StopIteration) as done:
        reading.send(None)  # suspends at the first await that yields to the loop
    assert done.value.value == {"steering": ["later"]}
    assert client._waiting == {}


async def test_an_unanswered_command_waits_for_its_answer_and_gives_the_loop_its_turn() -> None:
    client = object.__new__(_Client)
    pending = PendingCommand("abort", "b2")
    client._waiting = {"b2": pending}
    reading = client.answer(pending)
    reading.send(None)  # waits
    reading.close()
    assert client._waiting == {}
