"""The client-side stdio peer reads a frame many pipe reads long in linear time: it splits it
once it is whole, not once a read (quadratic: the tests' client, draining a flood on a loaded
machine, fell behind its own timeouts)."""

from __future__ import annotations

import sys

import pytest

from bridge.tools.stdio_client import LSP, NDJSON, Framing, StdioPeer

BIG = 8 * 1024 * 1024  # many times a pipe's capacity: the child's write arrives in many reads

WRITER = """\
import json, sys
big = json.dumps({"text": "x" * int(sys.argv[2])}).encode()
small = b'{"n": 2}'
if sys.argv[1] == "lsp":
    frames = [b"Content-Length: " + str(len(b)).encode() + b"\\r\\n\\r\\n" + b for b in (big, small)]
else:
    frames = [big + b"\\n", small + b"\\n"]
sys.stdout.buffer.write(b"".join(frames))
"""


class CountingFraming:
    """A framing that counts its splits."""

    def __init__(self, inner: Framing) -> None:
        self.inner = inner
        self.splits = 0

    def encode(self, body: bytes) -> bytes:
        return self.inner.encode(body)

    def split(self, buf: bytes) -> tuple[list[bytes], bytes]:
        self.splits += 1
        return self.inner.split(buf)

    def finish(self, rest: bytes) -> list[bytes]:
        return self.inner.finish(rest)

    def wanted(self, rest: bytes) -> int:
        return self.inner.wanted(rest)

    def may_end_body(self, chunk: bytes) -> bool:
        return self.inner.may_end_body(chunk)


@pytest.mark.parametrize("name", ["lsp", "ndjson"])
def test_a_frame_many_reads_long_is_split_once_it_is_whole(name: str) -> None:
    framing = CountingFraming(LSP if name == "lsp" else NDJSON)
    peer = StdioPeer([sys.executable, "-c", WRITER, name, str(BIG)], framing=framing)
    try:
        big = peer.read()
        assert big is not None and big["text"] == "x" * BIG
        assert peer.read() == {"n": 2}
        assert peer.read() is None
        reads = BIG // (64 * 1024)
        assert framing.splits <= 4, f"{framing.splits} splits of a frame that took about {reads} reads"
    finally:
        assert peer.proc.wait(10) == 0
