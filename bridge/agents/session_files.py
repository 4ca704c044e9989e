"""What the agents' session stores share: a session file's checkpoint, and deleting one."""

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
