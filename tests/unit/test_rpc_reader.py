"""The inbound reader over a real pipe and its real thread: when the loop falls behind, the
reader stops reading, so the client's writes block (bounded memory), and no frame is lost."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from bridge.rpc_reader import read_frames
from bridge.transport import frame

FRAME_BYTES = 1024 * 1024
FRAMES = 96  # three times what the inbox may hold (32 MB)


class BusyProtocol:
    """Stands in for pygls: records each message; the first one keeps the loop busy until the
    client either finished writing everything or has been held back for a while."""

    writer = None

    def __init__(self, client_done: threading.Event) -> None:
        self.client_done = client_done
        self.handled: list[int] = []
        self.client_finished_while_busy: bool | None = None

    def structure_message(self, raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return ("message", raw)

    def handle_message(self, message: tuple[str, dict[str, Any]]) -> None:
        if self.client_finished_while_busy is None:
            # Blocks the loop thread on purpose: the reader thread alone decides what it takes in.
            self.client_finished_while_busy = self.client_done.wait(timeout=2.0)
        self.handled.append(message[1]["params"]["n"])


async def test_a_client_faster_than_the_loop_is_held_back_and_loses_nothing() -> None:
    read_end, write_end = os.pipe()
    client_done = threading.Event()
    pad = "x" * FRAME_BYTES

    def client() -> None:
        with os.fdopen(write_end, "wb") as out:
            for n in range(FRAMES):
                body = b'{"jsonrpc":"2.0","method":"$/pad","params":{"n":%d,"pad":"%s"}}' % (n, pad.encode())
                out.write(frame(body))
                out.flush()
        client_done.set()

    protocol = BusyProtocol(client_done)
    ended: list[str] = []
    writing = threading.Thread(target=client, daemon=True)
    writing.start()
    with os.fdopen(read_end, "rb") as stream:
        await asyncio.wait_for(read_frames(stream, protocol, ended.append), 60)  # type: ignore[arg-type]
    writing.join(timeout=10)
    assert protocol.client_finished_while_busy is False, "the reader took in everything, unbounded"
    assert protocol.handled == list(range(FRAMES)), "every frame, in order"
    assert ended == ["end of input"]
