"""The inbound reader over a real pipe: when the loop falls behind, nothing more is read, so the
client's writes block (bounded memory), and no frame is lost or reordered; the framing survives
any split of the bytes and reads on past a broken frame."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from bridge.fronts.lsp.reader import (
    INLINE_PARSE_BYTES,
    MAX_BODY,
    MAX_HEADER_LINE,
    FrameParser,
    read_frames,
    reads_on_loop,
)
from bridge.fronts.lsp.writer import frame

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


class RecordingProtocol:
    """Stands in for pygls: records each message it is handed, in order."""

    writer = None

    def __init__(self) -> None:
        self.handled: list[Any] = []

    def structure_message(self, raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return ("message", raw)

    def handle_message(self, message: tuple[str, dict[str, Any]]) -> None:
        self.handled.append(message[1]["params"]["n"])


def _frames(bodies: list[bytes]) -> bytes:
    return b"".join(frame(body) for body in bodies)


def test_the_parser_gives_the_same_frames_however_the_bytes_are_split() -> None:
    bodies = [b'{"n":%d,"pad":"%s"}' % (n, b"y" * n * 7) for n in range(40)]
    stream = b"\r\n" + _frames(bodies)  # a stray blank line ahead of the first header is skipped
    whole = FrameParser().feed(stream)
    parser = FrameParser()
    split = [item for index in range(len(stream)) for item in parser.feed(stream[index : index + 1])]
    assert whole == split == [(body, None) for body in bodies]


def test_the_parser_reports_a_broken_frame_and_reads_on() -> None:
    good = b'{"n":1}'
    too_big = b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)
    no_length = b"X-Other: 1\r\n\r\n"
    long_header = b"X-Long: " + b"z" * (MAX_HEADER_LINE - 8 + 10) + b"\r\nContent-Length: 7\r\n\r\n" + good
    frames = FrameParser().feed(too_big + frame(good) + no_length + frame(good) + long_header)
    assert frames == [
        (None, f"frame of {MAX_BODY + 1} bytes exceeds the {MAX_BODY}-byte limit"),
        (good, None),
        (None, "frame without Content-Length"),
        (good, None),
        # The first 8 KiB of the long line are too long; its rest is then a line with no colon.
        (good, "malformed header line b'zzzzzzzzzz\\r\\n'"),
    ]


def test_the_parser_keeps_an_incomplete_frame_for_the_next_read() -> None:
    parser = FrameParser()
    data = frame(b'{"n":1}')
    assert parser.feed(data[:-3]) == []
    assert parser.feed(data[-3:]) == [(b'{"n":1}', None)]


async def test_a_body_too_big_to_parse_on_the_loop_keeps_its_place_in_line() -> None:
    read_end, write_end = os.pipe()
    assert reads_on_loop(read_end)
    big = b'{"jsonrpc":"2.0","method":"$/pad","params":{"n":1,"pad":"%s"}}' % (
        b"x" * (INLINE_PARSE_BYTES * 4)
    )
    small = [b'{"jsonrpc":"2.0","method":"$/pad","params":{"n":%d}}' % n for n in (0, 2, 3)]

    def client() -> None:
        with os.fdopen(write_end, "wb") as out:
            out.write(_frames([small[0], big, small[1], small[2]]))

    protocol = RecordingProtocol()
    ended: list[str] = []
    writing = threading.Thread(target=client, daemon=True)
    writing.start()
    with os.fdopen(read_end, "rb") as stream:
        await asyncio.wait_for(read_frames(stream, protocol, ended.append), 30)  # type: ignore[arg-type]
        assert os.get_blocking(read_end), "stdin is left as it was found"
    writing.join(timeout=10)
    assert protocol.handled == [0, 1, 2, 3]
    assert ended == ["end of input"]


async def test_a_message_the_direct_handler_takes_never_reaches_the_protocol() -> None:
    read_end, write_end = os.pipe()
    bodies = [b'{"jsonrpc":"2.0","method":"$/pad","params":{"n":%d}}' % n for n in range(4)]
    os.write(write_end, _frames(bodies))
    os.close(write_end)
    protocol = RecordingProtocol()
    taken: list[int] = []

    def direct(message: dict[str, Any]) -> bool:
        if message["params"]["n"] % 2:
            taken.append(message["params"]["n"])
            return True
        return False

    with os.fdopen(read_end, "rb") as stream:
        await asyncio.wait_for(read_frames(stream, protocol, lambda _: None, direct), 30)  # type: ignore[arg-type]
    assert (protocol.handled, taken) == ([0, 2], [1, 3])
