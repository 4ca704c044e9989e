"""Readers of /proc: one process's stat and environ, every process's stat, our own children."""

from __future__ import annotations

import os
from typing import Final, NamedTuple

import psutil

_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcStat(NamedTuple):
    """What one read of /proc/<pid>/stat tells: parent, start time (clock ticks), zombie."""

    ppid: int
    start: int
    zombie: bool


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat of one process, or None when it is gone (never blocks on D state)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(int(fields[1]), int(fields[19]), fields[0] in (b"Z", b"X"))
    except (IndexError, ValueError):
        return None


def read_environ(pid: int) -> bytes:
    """/proc/<pid>/environ of one process (empty when it is gone or not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def read_cmdline(pid: int) -> tuple[str, ...]:
    """/proc/<pid>/cmdline as its arguments (empty when it is gone or a kernel thread)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ()
    return (
        tuple(part.decode(errors="replace") for part in raw.removesuffix(b"\0").split(b"\0")) if raw else ()
    )


def now_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat start times use (rounded down)."""
    try:
        with open("/proc/uptime", "rb") as handle:
            return max(0, int(float(handle.read().split()[0]) * _CLOCK_TICKS) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def all_stats() -> dict[int, ProcStat]:
    """/proc/<pid>/stat of every process now (one pass over /proc: call it off the event loop)."""
    stats: dict[int, ProcStat] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                pid = int(entry.name)
                stat = read_stat(pid)
                if stat is not None:
                    stats[pid] = stat
    return stats


_children_files: list[bool] = []


def own_children() -> list[int]:
    """This process's children: /proc/self/task/*/children (each thread's), or psutil without it."""
    if not _children_files:
        _children_files.append(os.path.exists(f"/proc/self/task/{os.getpid()}/children"))
    if not _children_files[0]:
        try:
            return [proc.pid for proc in psutil.Process().children(recursive=False)]
        except psutil.Error:
            return []
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as handle:
                pids.extend(int(pid) for pid in handle.read().split())
        except OSError:
            continue  # that thread ended meanwhile
    return pids
