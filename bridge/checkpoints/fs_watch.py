"""The paths of a workspace that changed since the last look, from Linux inotify (no scan)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import struct
import sys
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


class Watcher:
    """The changed paths (relative, `/`-separated) of one workspace since the last `drain()`."""

    def __init__(self, libc: ctypes.CDLL, fd: int, root: Path, skip: frozenset[str] = frozenset()) -> None:
        self._libc = libc
        self._fd = fd
        self.root = root
        #: Folders (relative to root) never walked nor watched: what the snapshot leaves out.
        self._skip = skip
        self._paths: dict[int, str] = {}
        self._changed: set[str] = set()
        self._lost = False
        self._watch_tree("")

    @classmethod
    def start(cls, root: Path, skip: frozenset[str] = frozenset()) -> Watcher | None:
        """Watch `root`'s folders but those in `skip` (None: inotify is not to be had here)."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        watcher = cls(libc, fd, root, skip)
        if watcher._lost:
            watcher.close()
            return None
        return watcher

    def close(self) -> None:
        """Stop watching."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

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
                self._watch_tree(rel)

    def _unwatch_under(self, rel: str) -> None:
        """A folder moved away: its watches would name its files by the old path."""
        prefix = rel + "/"
        for wd, path in list(self._paths.items()):
            if path == rel or path.startswith(prefix):
                del self._paths[wd]
                self._libc.inotify_rm_watch(self._fd, wd)

    def _watch_tree(self, rel: str) -> None:
        """Watch a folder and every folder under it; the files already in a new one count as
        changed (they may have been written before its watch took)."""
        stack = [rel]
        while stack:
            current = stack.pop()
            folder = self.root / current if current else self.root
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
            if wd < 0:
                if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                    continue  # gone already (its parent's event says so)
                self._lost = True  # the watch limit, most likely: scan instead
                return
            self._paths[wd] = current
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name == ".git":
                    continue
                child = f"{current}/{entry.name}" if current else entry.name
                if child in self._skip:
                    continue
                if rel:
                    self._changed.add(child)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(child)
