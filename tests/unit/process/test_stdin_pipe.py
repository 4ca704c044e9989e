"""The agent's stdin as the bridge owns it: writes leave in the call, in order, with backpressure,
and a closed pipe is an error, never a hang; the cancel token's synchronous callbacks."""

from __future__ import annotations

import os
import threading

import anyio
import pytest

from bridge.engines.cancel import CancelToken
from bridge.process.stdin_pipe import StdinClosed, StdinPipe

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _read_all(fd: int, into: bytearray, done: threading.Event) -> None:
    while chunk := os.read(fd, 65536):
        into.extend(chunk)
    done.set()


async def test_a_write_is_in_the_pipe_before_write_now_returns() -> None:
    read_end, write_end = os.pipe()
    pipe = await StdinPipe.open(write_end)
    try:
        pipe.write_now(b'{"type":"abort"}\n')
        os.set_blocking(read_end, False)
        assert os.read(read_end, 100) == b'{"type":"abort"}\n', "no await was needed for the bytes to leave"
    finally:
        pipe.close()
        os.close(read_end)


async def test_more_than_the_pipe_holds_arrives_whole_and_in_order_and_drain_waits_for_room() -> None:
    read_end, write_end = os.pipe()
    pipe = await StdinPipe.open(write_end)
    received = bytearray()
    done = threading.Event()
    lines = [f"line {i:06d} ".encode() * 40 + b"\n" for i in range(4000)]  # ~2 MB, far over 64 KiB
    for line in lines:
        pipe.write_now(line)  # never blocks, whatever the reader does
    reader = threading.Thread(target=_read_all, args=(read_end, received, done), daemon=True)
    reader.start()
    with anyio.fail_after(20):
        await pipe.drain()
        pipe.close()  # EOF only after the rest is out
        await anyio.to_thread.run_sync(done.wait)
        await pipe.wait_closed()
    os.close(read_end)
    assert bytes(received) == b"".join(lines)


async def test_a_pipe_whose_reader_is_gone_refuses_writes_instead_of_hanging() -> None:
    read_end, write_end = os.pipe()
    pipe = await StdinPipe.open(write_end)
    os.close(read_end)
    pipe.write_now(b"into the void\n")  # the kernel says EPIPE: the pipe closes itself
    with anyio.fail_after(5):
        await pipe.wait_closed()
    assert pipe.closed
    with pytest.raises(StdinClosed):
        pipe.write_now(b"too late\n")
    with pytest.raises(StdinClosed):
        await pipe.drain()


async def test_close_now_ends_the_pipe_at_once_and_twice_is_harmless() -> None:
    read_end, write_end = os.pipe()
    pipe = await StdinPipe.open(write_end)
    pipe.write_now(b"moot\n")
    pipe.close_now()
    pipe.close_now()
    pipe.close()
    with anyio.fail_after(5):
        await pipe.wait_closed()
    assert os.read(read_end, 10) == b"moot\n", "what was in the pipe already stays"
    assert os.read(read_end, 10) == b"", "then the agent sees EOF"
    os.close(read_end)


def test_cancel_callbacks_run_inside_the_cancel_once_and_can_be_taken_back() -> None:
    token = CancelToken()
    seen: list[str] = []

    def failing() -> None:
        seen.append("failing")
        raise RuntimeError("a layer's bug")

    token.on_cancel(failing)
    take_back = token.on_cancel(lambda: seen.append("taken back"))
    token.on_cancel(lambda: seen.append(f"second, cancelled={token.cancelled}"))
    take_back()
    assert token.cancel("stop") is True
    assert seen == ["failing", "second, cancelled=True"], "run in the call, in order, past a failing one"
    assert token.cancel("again") is False
    late = token.on_cancel(lambda: seen.append("late"))
    late()
    assert seen == ["failing", "second, cancelled=True"], "once only; a late callback is not run"
