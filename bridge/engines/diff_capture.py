"""The `diff` of a file-changing tool call: the file's text before the tool ran and after."""

from __future__ import annotations

import asyncio
import difflib
import logging
import os
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio

from bridge.agents.seam import FileChangeWatch
from bridge.agents.values import FileChangeAnnounced, FileChangeDone, Hunk, Out

log = logging.getLogger(__name__)

MAX_DIFF_BYTES: Final = 1024 * 1024
# File times come from the kernel's coarse clock, up to a tick (4 ms at HZ=250) behind time_ns().
MTIME_SLACK_NS: Final = 10_000_000
# How long a tool.completed waits for one read of its file (a hung network file system) before
# it goes out without texts.
READ_SECONDS: Final = 2.0
# Reads running at once in the whole bridge: a read stuck in the kernel keeps its thread, so
# stuck reads can hold at most this many; past it a diff has no texts.
MAX_READS: Final = 8
_BOM: Final = "\ufeff"
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class FileState:
    """A file as read once: its text (None: missing or not read), whether it exists, whether it
    was too big to carry, or not read at all (not a regular file, unreadable, out of time)."""

    text: str | None
    exists: bool
    too_big: bool = False
    mtime_ns: int = 0
    unread: bool = False


_UNREAD: Final = FileState(None, True, unread=True)


def read_state(path: str) -> FileState:
    """Read `path` once if it is a regular file, bounded by MAX_DIFF_BYTES; blocking, never raises.

    The stat first only spares devices an open (opening one can act: a tape rewinds, a watchdog
    arms); what is read is decided by the fstat of the opened descriptor, so a file swapped in
    between is never read. The open is non-blocking: a FIFO without a writer does not wait.
    """
    try:
        if _of_the_kernel(path) or not stat.S_ISREG(os.stat(path).st_mode):
            return _UNREAD
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return FileState(None, False)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte, or a path that cannot be encoded
        log.info("could not read %r for its diff: %s", path, exc)
        return _UNREAD
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _UNREAD
        if info.st_size > MAX_DIFF_BYTES:
            return FileState(None, True, too_big=True, mtime_ns=info.st_mtime_ns)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_DIFF_BYTES:
            chunk = os.read(fd, MAX_DIFF_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        log.info("could not read %r for its diff: %s", path, exc)
        return _UNREAD
    finally:
        os.close(fd)
    if size > MAX_DIFF_BYTES:
        return FileState(None, True, too_big=True, mtime_ns=info.st_mtime_ns)
    return FileState(b"".join(chunks).decode("utf-8", "replace"), True, mtime_ns=info.st_mtime_ns)


_KERNEL_TREES: Final = ("/proc", "/sys", "/dev")


def _of_the_kernel(path: str) -> bool:
    """Whether `path`, as written or resolved, is in /proc, /sys or /dev. Their files look regular
    but are the bridge's own when read here (`/proc/self/fd/N` is the bridge's fd N, not the
    agent's), or have no contents to diff."""
    for candidate in (os.path.normpath(path), os.path.realpath(path)):
        if any(candidate == tree or candidate.startswith(tree + "/") for tree in _KERNEL_TREES):
            return True
    return False


class FileRead:
    """One read of a file for a diff; `state` is None until it is known."""

    __slots__ = ("state",)

    def __init__(self, state: FileState | None = None) -> None:
        self.state = state


# (path, called on the loop once the state of a read that did not finish at once is known)
StartRead = Callable[[str, Callable[[], None]], FileRead]

_reads_running = threading.BoundedSemaphore(MAX_READS)


def read_in_thread(path: str, done: Callable[[], None]) -> FileRead:
    """Start reading `path` on a thread of its own now; its state is unread after READ_SECONDS.

    Call on the event loop. A daemon thread: one stuck in the kernel never holds up the exit.
    """
    if not _reads_running.acquire(blocking=False):
        log.info("too many file reads for diffs at once; %r gets a diff without texts", path)
        return FileRead(_UNREAD)
    loop = asyncio.get_running_loop()
    read = FileRead()

    def finish(state: FileState) -> None:
        if read.state is None:
            read.state = state
            timer.cancel()
            done()

    def expire() -> None:
        if read.state is None:
            log.warning("reading %r for its diff took over %g s; its diff has no texts", path, READ_SECONDS)
            finish(_UNREAD)

    def work() -> None:
        try:
            state = read_state(path)
        finally:
            _reads_running.release()
        try:
            loop.call_soon_threadsafe(finish, state)
        except RuntimeError:  # the loop closed meanwhile: nobody waits for this read any more
            pass

    timer = loop.call_later(READ_SECONDS, expire)
    try:
        threading.Thread(target=work, name="pi-bridge-diff-read", daemon=True).start()
    except RuntimeError as exc:  # no thread to be had
        _reads_running.release()
        timer.cancel()
        log.warning("could not start a read of %r for its diff: %s", path, exc)
        return FileRead(_UNREAD)
    return read


def read_now(path: str, done: Callable[[], None]) -> FileRead:
    """Read `path` in the call (blocking: for tests of the race, which time their writes to it)."""
    return FileRead(read_state(path))


def _lf(text: str) -> str:
    """The text an LF patch is computed on: no BOM, CRLF and CR as LF."""
    return text.removeprefix(_BOM).replace("\r\n", "\n").replace("\r", "\n")


def _apply(hunks: tuple[Hunk, ...], text: str, *, reverse: bool = False) -> str | None:
    """`text` with the hunks of an LF patch applied (or undone); None if they do not match it.

    As pi's edit tool does, the lines the patch keeps keep their bytes (a BOM, CRLF), and a line
    it adds takes the line ending of the line where its change starts.
    """
    bom = _BOM if text.startswith(_BOM) else ""
    body = text.removeprefix(_BOM)
    if "\r" in body.replace("\r\n", ""):
        body = _lf(body)  # lone CRs (classic Mac endings) end lines in the patch: compare as LF
    lines = _LINE.findall(body)
    offset = 0
    for hunk in hunks:
        start, before, after = (
            (hunk.new_start, hunk.new, hunk.old) if reverse else (hunk.old_start, hunk.old, hunk.new)
        )
        position = (start - 1 if before else start) + offset
        found = lines[position : position + len(before)] if position >= 0 else []
        if position < 0 or tuple(line.replace("\r\n", "\n") for line in found) != before:
            return None
        lines[position : position + len(before)] = _changed(found, before, after)
        offset += len(after) - len(before)
    return bom + "".join(lines)


def _changed(found: list[str], before: tuple[str, ...], after: tuple[str, ...]) -> list[str]:
    """A hunk's lines after it: its kept lines as `found` holds them, each added one ending as
    the line where its change starts ends (CRLF or LF)."""
    result: list[str] = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            result.extend(found[i1:i2])
            continue
        place = found[i1] if i1 < len(found) else (found[i1 - 1] if i1 else "")
        crlf = place.endswith("\r\n")
        result.extend(line[:-1] + "\r\n" if crlf and line.endswith("\n") else line for line in after[j1:j2])
    return result


_LINE: Final = re.compile(r"[^\n]*\n|[^\n]+$")


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
    before: FileRead
    done: FileChangeDone | None = None
    after: FileRead | None = None

    def read(self) -> bool:
        """Whether both reads of the file are done."""
        return self.before.state is not None and self.after is not None and self.after.state is not None


def _dropped(outs: list[Out]) -> None:
    """Where a closed capture's messages would go: nowhere (none are left by then)."""


class DiffCapture:
    """Snapshots files at announced changes and adds `diff` to their tool.completed messages.

    One per attempt (a live conversation: one per run): feed it every stdout line (`note_line`)
    before the mapper, send the mapper's messages through `send`, and await `drained` before the
    attempt ends. A diff that cannot be computed (a bug) is left out and reported to `on_fault`.
    """

    def __init__(
        self,
        watch: FileChangeWatch | None,
        emit: Callable[[list[Out]], None],
        on_fault: Callable[[Exception], None] | None = None,
        *,
        start_read: StartRead = read_in_thread,
    ) -> None:
        self._watch = watch
        self._emit = emit
        self._on_fault = on_fault
        self._start_read = start_read
        self._started_ns = time.time_ns() - MTIME_SLACK_NS
        self._pending: dict[str, _Pending] = {}
        self._held: deque[list[Out]] = deque()
        self._drained: anyio.Event | None = None

    def close(self) -> None:
        """The attempt is over and its messages are out: let go of it (its emit and fault
        callbacks hold the attempt, which holds the prompt, and a read out of time may still
        hold this capture)."""
        self._emit = _dropped
        self._on_fault = None
        self._pending.clear()

    def note_line(self, line: bytes) -> None:
        """Start reading a file the moment a line announces its change (the snapshot), and again
        when the agent reports it done; keep the agent's report."""
        watch = self._watch
        if watch is None or watch.prefilter not in line:
            return  # the hot path: a text delta
        for event in watch.feed(line):
            if isinstance(event, FileChangeAnnounced):
                if event.call_id not in self._pending:
                    self._pending[event.call_id] = _Pending(
                        event, self._start_read(event.path, self._release)
                    )
            elif (pending := self._pending.get(event.call_id)) is not None:
                pending.done = event
                if pending.after is None:
                    pending.after = self._start_read(pending.change.path, self._release)

    @property
    def holding(self) -> bool:
        """Whether messages wait for a read."""
        return bool(self._held)

    def send(self, outs: list[Out]) -> None:
        """Emit the messages, each tool.completed of an announced change with its `diff`: now,
        or, when a read they need is still running or messages already wait, once it is done."""
        if not outs:
            return
        read = self._start_reads(outs)
        if self._held or not read:
            self._held.append(outs)
            return
        self._emit_with_diffs(outs)

    async def drained(self) -> None:
        """Wait until every message sent is out (bounded: each read has READ_SECONDS)."""
        while self._held:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    def _start_reads(self, outs: list[Out]) -> bool:
        """Start the final reads these messages need; whether every read they need is done."""
        if not self._pending:
            return True
        read = True
        for out in outs:
            if out.type != "tool.completed":
                continue
            pending = self._pending.get(out.content.get("toolCallId", ""))
            if pending is None:
                continue
            if pending.after is None:
                pending.after = self._start_read(pending.change.path, self._release)
            read = read and pending.read()
        return read

    def _release(self) -> None:
        """A read is done (or out of time): send, in order, what no longer waits."""
        try:
            while self._held and self._start_reads(self._held[0]):
                self._emit_with_diffs(self._held.popleft())
        except Exception as exc:  # on the loop's own callback: nobody above would hear of it
            log.exception("messages held for a diff could not be sent")
            if self._on_fault is not None:
                self._on_fault(exc)
        if not self._held and self._drained is not None:
            self._drained.set()
            self._drained = None

    def _emit_with_diffs(self, outs: list[Out]) -> None:
        if self._pending:
            for out in outs:
                if out.type not in ("tool.completed", "tool.failed"):
                    continue
                pending = self._pending.pop(out.content.get("toolCallId", ""), None)
                if pending is None or out.type != "tool.completed":
                    continue
                try:
                    out.content["diff"] = self._diff(pending)
                except Exception as exc:  # a bug here fails the run, never loses its messages
                    log.exception("the diff of %s could not be computed", pending.change.path)
                    if self._on_fault is not None:
                        self._on_fault(exc)
        self._emit(outs)

    def _diff(self, pending: _Pending) -> dict[str, Any]:
        change = pending.change
        snapshot = pending.before.state
        current = pending.after.state if pending.after is not None else None
        assert snapshot is not None and current is not None, "a diff waits for both reads"
        hunks = pending.done.hunks if pending.done else None
        reported_line = pending.done.first_line if pending.done else None
        done = pending.done
        if (
            change.content is not None
            and done is not None
            and done.original_known
            and len(done.original or "") <= MAX_DIFF_BYTES
        ):
            return self._diff_of_texts(change.path, done.original, change.content, reported_line)
        if hunks is not None and done is not None and done.original_known and done.original is not None:
            # The text the agent's tools read (an editor's unsaved buffer, which the disk need not
            # show) with pi's patch, made on that very text, applied.
            after = _apply(hunks, done.original)
            if after is not None and len(done.original) <= MAX_DIFF_BYTES:
                return self._diff_of_texts(change.path, done.original, after, reported_line)
        # An edit's patch gives the text after from the snapshot alone; a write carries it.
        needs_current = hunks is None and change.content is None
        if snapshot.too_big or current.too_big or snapshot.unread or (current.unread and needs_current):
            line = reported_line or (None if snapshot.exists else 1)
            return {"path": change.path, **({"line": line} if line else {})}
        if hunks is not None:
            before, after = _texts_by_patch(hunks, snapshot.text, current.text)
        elif change.content is not None:
            before, after = snapshot.text, change.content
            if snapshot.exists and before == after and snapshot.mtime_ns >= self._started_ns:
                before = _UNKNOWN  # the snapshot came after the write; the old text is lost
        else:
            before, after = snapshot.text, current.text
        return self._diff_of_texts(change.path, before, after, reported_line)

    @staticmethod
    def _diff_of_texts(
        path: str, before: Any, after: str | None, reported_line: int | None
    ) -> dict[str, Any]:
        """The diff of two texts (`before` may be _UNKNOWN: left out) with its first changed line."""
        diff: dict[str, Any] = {"path": path}
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
        forward = _apply(hunks, snapshot)
        if forward is not None:
            exact_after = current is not None and _lf(current) == _lf(forward)
            return snapshot, current if exact_after else forward
        backward = _apply(hunks, snapshot, reverse=True)
        if backward is not None:
            log.info("a file's snapshot came after its edit; its old text is the agent's patch reversed")
            return backward, snapshot
    if current is not None:
        backward = _apply(hunks, current, reverse=True)
        if backward is not None:
            return backward, current
    return snapshot, current
