"""Process measurements from /proc: CPU seconds, RSS, peak RSS, and the live processes of a tree."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process itself (all its threads, not its children)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def status_kb(pid: int, key: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM...)."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (zombies hold nothing but a pid; this container may not reap)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(pid: int) -> list[psutil.Process]:
    """The live descendants of pid."""
    try:
        return [proc for proc in psutil.Process(pid).children(recursive=True) if alive(proc)]
    except psutil.Error:
        return []


def still_alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of procs that are still alive."""
    return [proc for proc in procs if alive(proc)]


def cmdline(proc: psutil.Process) -> str:
    """The command line of proc, or "" if it is gone."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def is_checkpoint_git(proc: psutil.Process) -> bool:
    """A git the bridge runs itself for a checkpoint (its shadow repository in the state dir):
    the bridge's own short work, never a process of a run."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return bool(argv) and argv[0].endswith("git") and "--git-dir" in argv and "checkpoints" in " ".join(argv)


def wait_for_process(root_pid: int, needle: str, timeout: float = 10.0) -> bool:
    """Whether a live descendant of root_pid whose command line holds `needle` shows up in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in cmdline(proc) for proc in descendants(root_pid)):
            return True
        time.sleep(0.005)
    return False
