"""The outbound transport: frames leave in order, straight from the loop while nothing is queued,
through the writer thread once a full pipe makes them wait; stdout is left as it was found."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from bridge.fronts.lsp.writer import QueuedWriter, own_pipe

WAIT = 10.0


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


class NoQueue:
    def put(self, item: object) -> None:
        raise AssertionError("the frame went through the writer thread")


def read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        assert chunk, "the writer closed early"
        data += chunk
    return data


def test_a_frame_goes_straight_to_the_pipe_without_the_writer_thread(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    with os.fdopen(os.dup(write_fd), "wb", buffering=0) as stream:
        writer = QueuedWriter(stream, direct=True)
        writer._queue = NoQueue()  # type: ignore[assignment]  # the thread must not be handed it
        writer.write(b"hello")
        assert os.read(read_fd, 100) == b"hello"
        assert writer.pending_bytes == 0 and writer.bytes_written == 5


def test_what_a_full_pipe_does_not_take_is_queued_and_delivered_in_order(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    frames = [bytes([65 + i % 26]) * 50_000 for i in range(12)]  # 600 kB: far beyond a 64 kB pipe
    with os.fdopen(os.dup(write_fd), "wb", buffering=0) as stream:
        writer = QueuedWriter(stream, direct=True)
        for data in frames:
            writer.write(data)  # never blocks, although nobody reads yet
        assert writer.pending_bytes > 0, "the rest waits in the queue"
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(read_exactly(read_fd, 600_000)))
        reader.start()
        assert writer.drain(WAIT), "the writer thread delivers the queue once the pipe has room"
        reader.join(WAIT)
        assert received == [b"".join(frames)], "every byte, in order"
        writer.write(b"after")  # the queue is empty again: straight out
        assert os.read(read_fd, 100) == b"after"
        writer.close()
        writer._thread.join(WAIT)
        assert os.get_blocking(stream.fileno()), "stdout is left blocking, as it was found"


def test_a_closed_client_marks_the_writer_broken_and_nothing_raises(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    with os.fdopen(os.dup(write_fd), "wb", buffering=0) as stream:
        writer = QueuedWriter(stream, direct=True)
        os.close(read_fd)
        writer.write(b"lost")
        assert writer.broken
        writer.write(b"also lost")


def test_only_a_pipe_that_stderr_does_not_share_is_written_straight(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    assert own_pipe(write_fd)
    saved = os.dup(2)
    try:
        os.dup2(write_fd, 2)  # `2>&1`: the flag would reach stderr's writers too
        assert not own_pipe(write_fd)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    with open(os.devnull, "wb") as devnull:
        assert not own_pipe(devnull.fileno())
