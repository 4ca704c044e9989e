"""What both agents' session stores share: deleting one session's file."""

from __future__ import annotations

import os
import stat
from pathlib import Path


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
