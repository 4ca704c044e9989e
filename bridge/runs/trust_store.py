"""The user's saved project-trust decisions, one file per workspace in the bridge's state dir.

`trust/<hash of the resolved cwd>.json` under the state dir (the one rule_store.py names), never
in the workspace: a folder must not be able to trust itself. Files are 0600 in 0700 dirs and
written whole (temp file, then rename). A file that is not ours, writable by others, not valid or
for another folder counts as no decision, so the user is asked again: it never trusts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from bridge.runs.rule_store import workspace_key

log = logging.getLogger(__name__)

TRUST_DIR: Final = "trust"
#: The bytes a decision file may have (it holds a path and a word).
MAX_FILE_BYTES: Final = 64 * 1024

TrustDecision = Literal["trusted", "untrusted"]


class TrustStore:
    """Saved trust decisions by workspace (the resolved cwd)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, cwd: str) -> Path:
        """The decision file of the workspace `cwd`."""
        return self.root / TRUST_DIR / f"{workspace_key(cwd)}.json"

    def get(self, cwd: str) -> TrustDecision | None:
        """The saved decision for `cwd`; None when there is none or its file cannot be trusted."""
        path = self.path_for(cwd)
        try:
            for directory in (self.root, path.parent):
                _check_private(os.lstat(directory), directory, is_dir=True)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("project trust of %s: no decision read (%s)", cwd, exc)
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                _check_private(os.fstat(handle.fileno()), path, is_dir=False)
                document = json.loads(handle.read(MAX_FILE_BYTES + 1))
        except (OSError, ValueError) as exc:
            log.warning("project trust of %s: %s is not a decision (%s)", cwd, path, exc)
            return None
        if not isinstance(document, dict) or document.get("cwd") != os.path.realpath(cwd):
            log.warning("project trust of %s: %s is for another folder", cwd, path)
            return None
        decision = document.get("decision")
        return decision if decision in ("trusted", "untrusted") else None

    def set(self, cwd: str, decision: TrustDecision, resources: tuple[str, ...] = ()) -> None:
        """Save `decision` for `cwd` (with what the folder held when the user decided)."""
        path = self.path_for(cwd)
        for directory in (self.root, path.parent):
            try:
                directory.mkdir(mode=0o700, parents=True)
            except FileExistsError:
                _check_private(os.lstat(directory), directory, is_dir=True)
        document = {
            "version": 1,
            "cwd": os.path.realpath(cwd),
            "decision": decision,
            "resources": list(resources),
            "decidedAt": datetime.now(UTC).isoformat(),
        }
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".trust-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(document, handle, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def forget(self, cwd: str) -> bool:
        """Remove the saved decision for `cwd`; whether there was one."""
        try:
            self.path_for(cwd).unlink()
        except FileNotFoundError:
            return False
        return True


def _check_private(info: os.stat_result, path: Path, *, is_dir: bool) -> None:
    """Refuse (ValueError) a decision file or dir that is not ours or is writable by others."""
    kind_ok = stat.S_ISDIR(info.st_mode) if is_dir else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        raise ValueError(f"{path} is not a {'directory' if is_dir else 'regular file'}")
    if info.st_uid != os.getuid():
        raise ValueError(f"{path} is owned by uid {info.st_uid}, not by this user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(f"{path} is writable by group or others")
