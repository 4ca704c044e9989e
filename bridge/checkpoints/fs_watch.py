"""The paths of a workspace that changed since the last look, from Linux inotify (no scan)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import os
import struct
import sys
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Final

_IN_MODIFY: Final = 0x2
_IN_ATTRIB: Final = 0x4
_IN_CLOSE_WRITE: Final = 0x8
_IN_MOVED_FROM: Final = 0x40
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_IN_Q_OVERFLOW: Final = 0x4000
_IN_IGNORED: Final = 0x8000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000
_IN_EXCL_UNLINK: Final = 0x04000000
_IN_ISDIR: Final = 0x40000000
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
    | _IN_EXCL_UNLINK
)
_EVENT: Final = struct.Struct("iIII")
#: Switch the watcher off (every snapshot scans the whole workspace, as before it existed).
WATCH_ENV: Final = "PI_BRIDGE_CHECKPOINT_WATCH"


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or os.environ.get(WATCH_ENV) == "0":
        return None
    try:
        libc = _load_libc()
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def _load_libc() -> ctypes.CDLL:
    """The C library, loaded once: by its usual name first, since `find_library` runs
    `ldconfig` in a shell each time it is asked."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


#: Given new folders (relative), those the snapshots leave out whole: never walked nor watched.
LeftOut = Callable[[list[str]], set[str]]


class Watcher:
    """The changed paths (relative, `/`-separated) of one workspace since the last `drain()`.

    Reading the events and walking the folders created since are `drain`'s work, for a worker
    thread: a new folder can be a whole dependency tree. `pending` only asks the kernel whether
    there is anything to read, cheap enough for the event loop."""

    def __init__(
        self,
        libc: ctypes.CDLL,
        fd: int,
        root: Path,
        skip: frozenset[str] = frozenset(),
        left_out: LeftOut | None = None,
    ) -> None:
        self._libc = libc
        self._fd = fd
        self.root = root
        #: Folders (relative to root) never walked nor watched: what the snapshot leaves out.
        self._skip = set(skip)
        self._left_out = left_out
        self._paths: dict[int, str] = {}
        self._changed: set[str] = set()
        #: Folders created since the last drain, walked (unless left out) when it ends.
        self._new: list[str] = []
        self._lost = False
        self._watch_tree([""], new=False)

    @classmethod
    def start(
        cls, root: Path, skip: frozenset[str] = frozenset(), left_out: LeftOut | None = None
    ) -> Watcher | None:
        """Watch `root`'s folders but those in `skip`, and of the folders created later those
        `left_out` does not name (None: inotify is not to be had here)."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        watcher = cls(libc, fd, root, skip, left_out)
        if watcher._lost:
            watcher.close()
            return None
        return watcher

    def close(self) -> None:
        """Stop watching."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def watched(self) -> int:
        """How many folders are watched."""
        return len(self._paths)

    def pending(self) -> bool:
        """Whether anything may have changed since the last drain: events wait to be read, or
        the watcher lost track. Reads no event and walks nothing."""
        if self._fd < 0 or self._lost or self._changed or self._new:
            return True
        try:
            waiting = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return True
        count: int = struct.unpack("i", waiting)[0]
        return count > 0

    def drain(self) -> set[str] | None:
        """What changed since the last call (None: the watcher lost track, scan instead)."""
        if self._fd < 0:
            return None
        while True:
            try:
                data = os.read(self._fd, 256 * 1024)
            except BlockingIOError:
                break
            except OSError:
                self._lost = True
                break
            self._parse(data)
        if self._new and not self._lost:
            new, self._new = self._new, []
            self._watch_tree(new, new=True)
        if self._lost:
            return None
        changed, self._changed = self._changed, set()
        return changed

    # ------------------------------------------------------------------ events

    def _parse(self, data: bytes) -> None:
        at = 0
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
            raw = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            self._event(wd, mask, os.fsdecode(raw))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & _IN_Q_OVERFLOW:
            self._lost = True
            return
        base = self._paths.get(wd)
        if base is None:
            return
        if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
            if mask & _IN_IGNORED:
                del self._paths[wd]
            if base == "":
                self._lost = True  # the workspace folder itself went
            return
        if not name or name == ".git":
            return
        rel = f"{base}/{name}" if base else name
        self._changed.add(rel)
        if mask & _IN_ISDIR:
            if mask & (_IN_MOVED_FROM | _IN_DELETE):
                self._unwatch_under(rel)
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                self._new.append(rel)

    def _unwatch_under(self, rel: str) -> None:
        """A folder moved away: its watches would name its files by the old path."""
        prefix = rel + "/"
        for wd, path in list(self._paths.items()):
            if path == rel or path.startswith(prefix):
                del self._paths[wd]
                self._libc.inotify_rm_watch(self._fd, wd)

    def _watch_tree(self, roots: list[str], *, new: bool) -> None:
        """Watch folders and every folder under them, a level at a time, but what the snapshots
        leave out: `skip`, and in new folders what `left_out` names. The files already in a new
        folder count as changed (they may have been written before its watch took)."""
        level = roots if new else [rel for rel in roots if rel not in self._skip]
        while level and not self._lost:
            if new and self._left_out is not None:
                left = self._left_out(level)
                self._skip |= left
                self._skip -= set(level) - left  # made anew, and not left out this time
                level = [rel for rel in level if rel not in left]
            below: list[str] = []
            for current in level:
                below += self._watch_folder(current, mark=new)
                if self._lost:
                    return
            level = below

    def _watch_folder(self, current: str, *, mark: bool) -> list[str]:
        """Watch one folder (its entries count as changed if `mark`); its subfolders (not
        skipped) are returned for the next level."""
        folder = self.root / current if current else self.root
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
        if wd < 0:
            if ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):
                self._lost = True  # the watch limit, most likely: scan instead
            return []  # else gone already (its parent's event says so)
        self._paths[wd] = current
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return []
        below: list[str] = []
        for entry in entries:
            if entry.name == ".git":
                continue
            child = f"{current}/{entry.name}" if current else entry.name
            if not mark and child in self._skip:
                continue  # (a new folder's are asked of `left_out`, level by level)
            if mark:
                self._changed.add(child)
            if entry.is_dir(follow_symlinks=False):
                below.append(child)
        return below
