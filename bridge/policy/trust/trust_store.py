"""The user's saved project-trust decisions, one file per workspace in the bridge's state dir."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from bridge.policy.rule_store import key_of_resolved, write_atomically

log = logging.getLogger(__name__)

TRUST_DIR: Final = "trust"
#: The bytes a decision file may have (a path, a word, and the config's fingerprint).
MAX_FILE_BYTES: Final = 16 * 1024 * 1024
#: A config file up to this size is hashed; a bigger one is known by its stat alone.
HASH_LIMIT: Final = 1024 * 1024
#: Entries a fingerprint walks at most; past this it is incomplete, and never matches.
MAX_ENTRIES: Final = 20_000
#: The changes a question names (the rest are counted).
MAX_CHANGES_SHOWN: Final = 8
_INCOMPLETE: Final = "\0incomplete"
#: The folders whose decision file's path is kept (past it, all are built again once).
MAX_KEPT_PATHS: Final = 256

#: path (relative to the workspace, or absolute outside it) -> what is there:
#: ["dir", link], ["file", link, [size, mtime_ns, ctime_ns, ino], sha256 or None], ["other", link]
#: or ["missing", link] (a dangling symlink); `link` is the symlink's target, "" for none.
Fingerprint = dict[str, list[Any]]

TrustDecision = Literal["trusted", "untrusted"]


class TrustStore:
    """Saved trust decisions by workspace (the resolved cwd)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: dict[str, Path] = {}

    def path_for(self, cwd: str) -> Path:
        """The decision file of the workspace `cwd`."""
        return self._path_of(os.path.realpath(cwd))

    def _path_of(self, resolved: str) -> Path:
        """The decision file of a folder already resolved: its hash and path built once per
        folder, since this is on every prompt's path."""
        path = self._paths.get(resolved)
        if path is None:
            if len(self._paths) >= MAX_KEPT_PATHS:
                self._paths.clear()
            path = self._paths[resolved] = self.root / TRUST_DIR / f"{key_of_resolved(resolved)}.json"
        return path

    def get(self, cwd: str) -> TrustDecision | None:
        """The saved decision for `cwd`; None when there is none or its file cannot be trusted."""
        record = self.get_record(cwd)
        return record[0] if record is not None else None

    def get_record(self, cwd: str) -> tuple[TrustDecision, Fingerprint | None] | None:
        """The saved decision for `cwd` and the config fingerprint it covers (None: none was
        recorded); None when there is no decision or its file cannot be trusted."""
        return self.get_resolved(os.path.realpath(cwd))

    def get_resolved(self, resolved: str) -> tuple[TrustDecision, Fingerprint | None] | None:
        """`get_record` of a folder already resolved (symlinks followed, as `os.path.realpath`)."""
        path = self._path_of(resolved)
        try:
            for directory in (self.root, path.parent):
                _check_private(os.lstat(directory), directory, is_dir=True)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("project trust of %s: no decision read (%s)", resolved, exc)
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                _check_private(os.fstat(handle.fileno()), path, is_dir=False)
                document = json.loads(handle.read(MAX_FILE_BYTES + 1))
        except (OSError, ValueError) as exc:
            log.warning("project trust of %s: %s is not a decision (%s)", resolved, path, exc)
            return None
        if not isinstance(document, dict) or document.get("cwd") != resolved:
            log.warning("project trust of %s: %s is for another folder", resolved, path)
            return None
        decision = document.get("decision")
        if decision not in ("trusted", "untrusted"):
            return None
        config = document.get("config")
        valid = isinstance(config, dict) and all(isinstance(v, list) and v for v in config.values())
        return decision, config if valid else None

    def set(
        self,
        cwd: str,
        decision: TrustDecision,
        resources: tuple[str, ...] = (),
        config: Fingerprint | None = None,
    ) -> None:
        """Save `decision` for `cwd` (with what the folder held when the user decided, and the
        fingerprint of the config a trust covers)."""
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
            "config": config if config is not None else {},
            "decidedAt": datetime.now(UTC).isoformat(),
        }
        write_atomically(path, (json.dumps(document, indent=2) + "\n").encode(), prefix=".trust-")

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


# ---------------------------------------------------------------------- config fingerprints


def fingerprint(roots: tuple[str, ...], cwd: str, previous: Fingerprint | None = None) -> Fingerprint:
    """What is under `roots` now (symlinks followed, as an agent loading them follows them); a
    file whose stat equals its entry in `previous` keeps that entry's hash. Blocking I/O."""
    base = os.path.realpath(cwd)
    found: Fingerprint = {}
    seen: set[tuple[int, int]] = set()
    stack = [os.path.join(base, root) for root in reversed(roots)]
    while stack:
        if len(found) >= MAX_ENTRIES:
            found[_INCOMPLETE] = ["incomplete"]
            break
        path = stack.pop()
        if not os.path.lexists(path):
            continue
        key = _key_of(path, base)
        entry, folder = _entry(path, (previous or {}).get(key))
        found[key] = entry
        if folder is None or folder in seen:
            continue
        seen.add(folder)
        try:
            names = sorted(os.listdir(path), reverse=True)
        except OSError:
            continue
        stack.extend(os.path.join(path, name) for name in names)
    return found


def within(config: Fingerprint, roots: tuple[str, ...], cwd: str) -> Fingerprint:
    """The part of `config` under `roots` (a decision's fingerprint may cover other agents')."""
    base = os.path.realpath(cwd)
    keys = [_key_of(os.path.join(base, root), base) for root in roots]
    return {
        path: entry
        for path, entry in config.items()
        if path == _INCOMPLETE or any(path == key or path.startswith(key.rstrip("/") + "/") for key in keys)
    }


def merged(saved: Fingerprint | None, roots: tuple[str, ...], cwd: str, now: Fingerprint) -> Fingerprint:
    """`saved` with its part under `roots` replaced by `now`."""
    kept = saved or {}
    inside = within(kept, roots, cwd)
    return {**{k: v for k, v in kept.items() if k not in inside}, **now}


def changes(before: Fingerprint, after: Fingerprint) -> list[str]:
    """What differs, as the user reads it ("added <config>/extensions/evil.ts"); empty: the same."""
    if _INCOMPLETE in before or _INCOMPLETE in after:
        return ["more files than a fingerprint holds"]
    found: list[str] = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old is None:
            found.append(f"added {path}")
        elif new is None:
            found.append(f"removed {path}")
        elif not _same(old, new):
            found.append(f"changed {path}")
    return found


def shown(found: list[str]) -> str:
    """Changes in one line, the first few named."""
    more = len(found) - MAX_CHANGES_SHOWN
    return ", ".join(found[:MAX_CHANGES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _same(old: list[Any], new: list[Any]) -> bool:
    if old[:2] != new[:2]:
        return False
    if old[0] != "file":
        return True
    if len(old) < 4 or len(new) < 4:
        return False
    if old[3] is not None and new[3] is not None:
        return bool(old[3] == new[3])
    return bool(old[2] == new[2])  # too big to hash: its stat decides


def _key_of(path: str, base: str) -> str:
    return os.path.relpath(path, base) if path == base or path.startswith(base + os.sep) else path


def _entry(path: str, previous: list[Any] | None) -> tuple[list[Any], tuple[int, int] | None]:
    """One path's entry, and its (dev, ino) when it is a folder to walk."""
    try:
        link = os.readlink(path) if os.path.islink(path) else ""
        info = os.stat(path)
    except OSError:
        return ["missing", ""], None
    if stat.S_ISDIR(info.st_mode):
        return ["dir", link], (info.st_dev, info.st_ino)
    if not stat.S_ISREG(info.st_mode):
        return ["other", link], None
    signature = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]
    if previous is not None and previous[:3] == ["file", link, signature] and len(previous) == 4:
        return previous, None
    digest: str | None = None
    if info.st_size <= HASH_LIMIT:
        try:
            with open(path, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except OSError:
            digest = "unreadable"
    return ["file", link, signature, digest], None
