"""Line framing of an agent's stdout, and a bounded tail of its stderr.

Lines are split on b"\\n" only, with a bound on their length so memory stays bounded per run.
"""

from __future__ import annotations

from typing import Final

# An agent's end-of-run event may repeat the whole conversation, prompt included: a huge prompt
# makes a huge line. Longer lines are dropped as diagnostics so memory stays bounded per run.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024


class LineFramer:
    """Split a byte stream into lines on b"\\n" only, with a bound on line length.

    pi writes U+2028/U+2029/U+0085 raw inside JSON strings, so `splitlines()` would cut events
    apart. A line longer than `max_line` is dropped (memory stays bounded) and reported through
    `oversized` as a short description, to become a diagnostic.
    """

    __slots__ = (
        "_discarded",
        "_discarding",
        "_head",
        "_parts",
        "_size",
        "max_line",
        "oversized",
        "oversized_heads",
    )

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._discarding = False
        self._discarded = 0
        self._head = b""
        self.oversized: list[str] = []
        self.oversized_heads: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the complete lines (without b"\\n") that `chunk` finishes."""
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if lines:
            first = lines[0]
            if self._discarding:
                self._note_oversized(self._discarded + len(first))
                lines = lines[1:]
            elif self._parts:
                self._parts.append(first)
                lines[0] = b"".join(self._parts)
                self._parts.clear()
                self._size = 0
            self._discarding = False
            if any(len(line) > self.max_line for line in lines):
                kept: list[bytes] = []
                for line in lines:
                    if len(line) > self.max_line:
                        self._head = line[:200]
                        self._note_oversized(len(line))
                    else:
                        kept.append(line)
                lines = kept
        self._append_partial(tail)
        return lines

    def finish(self) -> bytes | None:
        """At end of stream: the last line if it had no newline (and was within bounds)."""
        if self._discarding:
            self._note_oversized(self._discarded)
            self._discarding = False
            return None
        if not self._parts:
            return None
        line = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        return line or None

    def _append_partial(self, tail: bytes) -> None:
        if not tail:
            return
        if self._discarding:
            self._discarded += len(tail)
            return
        self._parts.append(tail)
        self._size += len(tail)
        if self._size > self.max_line:
            joined = b"".join(self._parts)
            self._head = joined[:200]
            self._discarded = len(joined)
            self._parts.clear()
            self._size = 0
            self._discarding = True

    def _note_oversized(self, size: int) -> None:
        head = self._head.decode("utf-8", "replace")
        self.oversized_heads.append(self._head)
        self.oversized.append(
            f"line of {size} bytes over the {self.max_line}-byte bound dropped; it began: {head}"
        )
        self._discarded = 0
        self._head = b""


class TailBuffer:
    """Keep the last `limit` bytes written to it (a bounded stderr tail)."""

    __slots__ = ("_chunks", "_size", "limit")

    def __init__(self, limit: int = 16 * 1024) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        """Append data, dropping the oldest bytes beyond the limit."""
        self._chunks.append(data)
        self._size += len(data)
        if self._size > 2 * self.limit:
            joined = b"".join(self._chunks)[-self.limit :]
            self._chunks = [joined]
            self._size = len(joined)

    def text(self) -> str:
        """The kept tail, decoded leniently."""
        return b"".join(self._chunks)[-self.limit :].decode("utf-8", "replace")
