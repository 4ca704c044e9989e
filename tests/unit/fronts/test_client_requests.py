"""The LSP front's own requests to its client: framed by the bridge, each answer taken ahead of
pygls by its id, anything else left to pygls; a cancelled wait withdraws the request."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bridge.fronts.lsp.client_requests import ClientRequests


class _Writer:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.frames.append(orjson.loads(data.split(b"\r\n\r\n", 1)[1]))


class _Protocol:
    def __init__(self) -> None:
        self.writer = _Writer()
        self.notified: list[tuple[str, Any]] = []

    def notify(self, method: str, params: Any) -> None:
        self.notified.append((method, params))


async def _asked(requests: ClientRequests, protocol: _Protocol) -> tuple[asyncio.Task[Any], str]:
    task = asyncio.create_task(requests.send("pi/requestPermission", {"toolCallId": "c1"}))
    while not protocol.writer.frames:
        await asyncio.sleep(0)
    return task, protocol.writer.frames[-1]["id"]


@pytest.mark.parametrize(
    ("answer", "result"),
    [({"result": {"outcome": "selected"}}, {"outcome": "selected"}), ({"error": {"code": -1}}, None)],
)
async def test_the_answer_with_the_request_s_id_is_its_result_and_an_error_is_none(
    answer: dict[str, Any], result: Any
) -> None:
    protocol = _Protocol()
    requests = ClientRequests(protocol)  # type: ignore[arg-type]
    task, msg_id = await _asked(requests, protocol)
    assert protocol.writer.frames[-1]["method"] == "pi/requestPermission"
    assert not requests.take_answer({"jsonrpc": "2.0", "id": "someone-else", "result": 1})
    assert not requests.take_answer({"jsonrpc": "2.0", "id": msg_id, "method": "x"}), "a request, not ours"
    assert requests.take_answer({"jsonrpc": "2.0", "id": msg_id, **answer})
    assert await asyncio.wait_for(task, 5) == result
    assert not requests.take_answer({"jsonrpc": "2.0", "id": msg_id, "result": 2}), "a late second answer"


async def test_a_cancelled_wait_withdraws_the_request_and_its_late_answer_is_not_taken() -> None:
    protocol = _Protocol()
    requests = ClientRequests(protocol)  # type: ignore[arg-type]
    task, msg_id = await _asked(requests, protocol)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [method for method, _ in protocol.notified] == ["$/cancelRequest"]
    assert not requests.take_answer({"jsonrpc": "2.0", "id": msg_id, "result": {}})


async def test_no_writer_is_no_answer() -> None:
    protocol = _Protocol()
    protocol.writer = None  # type: ignore[assignment]
    assert await ClientRequests(protocol).send("pi/ask", {}) is None  # type: ignore[arg-type]
