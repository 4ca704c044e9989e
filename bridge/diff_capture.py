"""The `diff` of a file-changing tool call: the file's text before the tool ran and after.

Agent-neutral: the agent's `FileChangeWatch` says which call changes which file (and may report
its own patch). The capture snapshots the file as soon as the call is announced and attaches
`{path, oldText, newText, line}` to the call's `tool.completed`. Files over 1 MiB carry only
`path` and `line`.

The race: the bridge reads the agent's stdout asynchronously (and not at all while the editor is
slow to read, see backpressure), so the agent may have changed the file before the snapshot.
The result is still right:
- with the agent's patch (pi's edit): the snapshot is checked against it. If the patch applies
  forward, the snapshot is the text before; if it applies only backward, the snapshot was taken
  after the change and the text before is the patch reversed; the same goes for the file read
  at the end, in case a later tool changed it again before `tool.completed` was read.
- for a whole-file write: the text after is the written content; a snapshot that equals it and
  was modified since the attempt started was taken too late, so `oldText` is left out rather
  than guessed (present and null means: the file did not exist).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Final

from bridge.agent import FileChangeAnnounced, FileChangeDone, FileChangeWatch, Hunk, Out

log = logging.getLogger(__name__)

MAX_DIFF_BYTES: Final = 1024 * 1024
# File times come from the kernel's coarse clock, up to a tick (4 ms at HZ=250) behind time_ns().
MTIME_SLACK_NS: Final = 10_000_000
_BOM: Final = "\ufeff"


@dataclass(frozen=True, slots=True)
class FileState:
    """A file as read once: its text (None: missing or unreadable), whether too big to carry."""

    text: str | None
    exists: bool
    too_big: bool = False
    mtime_ns: int = 0


def read_state(path: str) -> FileState:
    """Read `path` once, bounded by MAX_DIFF_BYTES."""
    try:
        stat = os.stat(path)
        if stat.st_size > MAX_DIFF_BYTES:
            return FileState(None, True, too_big=True, mtime_ns=stat.st_mtime_ns)
        with open(path, "rb") as stream:
            data = stream.read(MAX_DIFF_BYTES + 1)
    except FileNotFoundError:
        return FileState(None, False)
    except OSError as exc:
        log.info("could not read %s for its diff: %s", path, exc)
        return FileState(None, os.path.exists(path))
    if len(data) > MAX_DIFF_BYTES:
        return FileState(None, True, too_big=True, mtime_ns=stat.st_mtime_ns)
    return FileState(data.decode("utf-8", "replace"), True, mtime_ns=stat.st_mtime_ns)


def _lf(text: str) -> str:
    """The text an LF patch is computed on: no BOM, CRLF and CR as LF."""
    return text.removeprefix(_BOM).replace("\r\n", "\n").replace("\r", "\n")


def _apply(hunks: tuple[Hunk, ...], text: str, *, reverse: bool = False) -> str | None:
    """`text` with the hunks applied (or undone); None if they do not match it."""
    lines = text.splitlines(keepends=True)
    offset = 0
    for hunk in hunks:
        start, before, after = (
            (hunk.new_start, hunk.new, hunk.old) if reverse else (hunk.old_start, hunk.old, hunk.new)
        )
        position = (start - 1 if before else start) + offset
        if position < 0 or tuple(lines[position : position + len(before)]) != before:
            return None
        lines[position : position + len(before)] = after
        offset += len(after) - len(before)
    return "".join(lines)


def first_changed_line(before: str, after: str) -> int | None:
    """The first line (1-based) where two texts differ; None if they are equal."""
    if before == after:
        return None
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return index + 1
    return min(len(old), len(new)) + 1


@dataclass(slots=True)
class _Pending:
    change: FileChangeAnnounced
    before: FileState
    done: FileChangeDone | None = None


class DiffCapture:
    """Snapshots files at announced changes and adds `diff` to their tool.completed messages.

    One per attempt (a live conversation: one per run): feed it every stdout line (`note_line`)
    before the mapper, and pass the mapper's messages through `observe` before they are sent.
    """

    def __init__(self, watch: FileChangeWatch | None) -> None:
        self._watch = watch
        self._started_ns = time.time_ns() - MTIME_SLACK_NS
        self._pending: dict[str, _Pending] = {}

    def note_line(self, line: bytes) -> None:
        """Snapshot a file the moment a line announces its change; keep the agent's report."""
        watch = self._watch
        if watch is None or watch.prefilter not in line:
            return  # the hot path: a text delta
        for event in watch.feed(line):
            if isinstance(event, FileChangeAnnounced):
                if event.call_id not in self._pending:
                    self._pending[event.call_id] = _Pending(event, read_state(event.path))
            elif (pending := self._pending.get(event.call_id)) is not None:
                pending.done = event

    def observe(self, outs: list[Out]) -> list[Out]:
        """The same messages, each tool.completed of an announced change carrying its `diff`."""
        if not self._pending:
            return outs
        for out in outs:
            if out.type not in ("tool.completed", "tool.failed"):
                continue
            pending = self._pending.pop(out.content.get("toolCallId", ""), None)
            if pending is not None and out.type == "tool.completed":
                out.content["diff"] = self._diff(pending)
        return outs

    def _diff(self, pending: _Pending) -> dict[str, Any]:
        change, snapshot = pending.change, pending.before
        hunks = pending.done.hunks if pending.done else None
        reported_line = pending.done.first_line if pending.done else None
        current = read_state(change.path)
        if snapshot.too_big or current.too_big:
            line = reported_line or (None if snapshot.exists else 1)
            return {"path": change.path, **({"line": line} if line else {})}
        diff: dict[str, Any] = {"path": change.path}
        if hunks is not None:
            before, after = _texts_by_patch(hunks, snapshot.text, current.text)
        elif change.content is not None:
            before, after = snapshot.text, change.content
            if snapshot.exists and before == after and snapshot.mtime_ns >= self._started_ns:
                before = _UNKNOWN  # the snapshot came after the write; the old text is lost
        else:
            before, after = snapshot.text, current.text
        if before is not _UNKNOWN:
            diff["oldText"] = before
        diff["newText"] = after
        line = reported_line
        if line is None and isinstance(before, str) and after is not None:
            line = first_changed_line(before, after)
        elif line is None and before is None and after is not None:
            line = 1
        if line is not None:
            diff["line"] = line
        return diff


_UNKNOWN: Final[Any] = object()


def _texts_by_patch(
    hunks: tuple[Hunk, ...], snapshot: str | None, current: str | None
) -> tuple[str | None, str | None]:
    """(before, after) of a patched file, from a snapshot and a late read that may be off by one change."""
    if snapshot is not None:
        forward = _apply(hunks, _lf(snapshot))
        if forward is not None:
            exact_after = current is not None and _lf(current) == forward
            return snapshot, current if exact_after else forward
        backward = _apply(hunks, _lf(snapshot), reverse=True)
        if backward is not None:
            log.info("a file's snapshot came after its edit; its old text is the agent's patch reversed")
            return backward, snapshot
    if current is not None:
        backward = _apply(hunks, _lf(current), reverse=True)
        if backward is not None:
            return backward, current
    return snapshot, current
