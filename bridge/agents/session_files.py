"""What the agents' session stores share: a session file's checkpoint, cutting one back to it,
and deleting one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bridge.agents.values import SessionCheckpoint


def checkpoint_of(session_id: str, path: Path) -> SessionCheckpoint | None:
    """A session's file as it stands now (its size), for a retry to cut back to; None: unreadable."""
    try:
        return SessionCheckpoint(session_id, str(path), path.stat().st_size)
    except OSError:
        return None


def cut_back(checkpoint: SessionCheckpoint) -> str | None:
    """Truncate an appended-to session file to its size at `checkpoint` (a failed attempt's lines
    go, the earlier turns stay); None when done or nothing to cut, else why it was not."""
    assert checkpoint.path is not None
    try:
        with open(checkpoint.path, "r+b") as handle:
            if checkpoint.size < os.fstat(handle.fileno()).st_size:
                handle.truncate(checkpoint.size)
    except OSError as exc:
        return str(exc)
    return None


def delete_file(path: Path | None) -> bool:
    """Unlink a session's regular file (a symlink is unlinked, never followed); whether one was."""
    if path is None:
        return False
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) and not path.is_symlink():
            return False
        path.unlink()
    except FileNotFoundError:
        return False
    return True
