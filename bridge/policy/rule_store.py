"""Permission rules by workspace: workspace rules in the bridge's state dir, session rules in memory."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

import anyio
from pydantic import ConfigDict, Field, ValidationError

from bridge.contract import MAX_RULES, PermissionRule, WireModel

STATE_DIR_ENV: Final = "PI_BRIDGE_STATE_DIR"
RULES_DIR: Final = "permissions"


class RuleStoreError(Exception):
    """A rule file or its directory cannot be trusted or read; the message names which and why."""


class RuleFile(WireModel):
    """The on-disk form of one workspace's rules."""

    model_config = ConfigDict(strict=True)

    version: Literal[1] = 1
    cwd: str
    rules: list[PermissionRule] = Field(max_length=MAX_RULES)


def state_dir(env: Mapping[str, str]) -> Path:
    """The bridge's own state directory for `env` (an absolute override, XDG, or the default)."""
    override = env.get(STATE_DIR_ENV)
    if override and os.path.isabs(override):
        return Path(override)
    xdg = env.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "pi-bridge"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "pi-bridge"


def workspace_key(cwd: str) -> str:
    """The file name part for a workspace: a hash of its resolved path."""
    return key_of_resolved(os.path.realpath(cwd))


def key_of_resolved(resolved: str) -> str:
    """`workspace_key` of a path already resolved."""
    return hashlib.sha256(os.fsencode(resolved)).hexdigest()[:32]


#: The look of a rule file and its directories when it was read (see RuleStore.rules_async).
Stamp = tuple[tuple[int, ...] | None, ...] | None
#: Workspaces whose last read is kept (past it, all are read again once).
MAX_KEPT_READS: Final = 64


class RuleStore:
    """Workspace rules on disk and session rules in memory, both keyed by the resolved cwd."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._session_rules: dict[str, list[PermissionRule]] = {}
        self._lock = threading.Lock()
        #: cwd -> (the stamp its rule file had, its workspace rules then): read again on a change.
        self._read: dict[str, tuple[Stamp, list[PermissionRule]]] = {}

    def path_for(self, cwd: str) -> Path:
        """The rule file of the workspace `cwd`."""
        return self.root / RULES_DIR / f"{workspace_key(cwd)}.json"

    def rules(self, cwd: str) -> list[PermissionRule]:
        """Every rule in force for `cwd`: its workspace rules, then its session rules."""
        return [*self.workspace_rules(cwd), *self._session_rules.get(os.path.realpath(cwd), [])]

    def workspace_rules(self, cwd: str) -> list[PermissionRule]:
        """The stored rules of `cwd`: all of them or, on any doubt about the file, an error."""
        path = self.path_for(cwd)
        for directory in (self.root, path.parent):
            if directory.exists():
                _check_trusted(directory, is_dir=True)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RuleStoreError(f"rule file {path}: cannot be opened ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as handle:
            _check_trusted(path, is_dir=False, info=os.fstat(handle.fileno()))
            raw = handle.read()
        return _parse(path, raw, os.path.realpath(cwd))

    def replace(self, cwd: str, rules: Sequence[PermissionRule]) -> list[PermissionRule]:
        """Make `rules` the rules of `cwd`: workspace ones written to disk, session ones kept here."""
        resolved = os.path.realpath(cwd)
        stored = [rule for rule in rules if rule.scope == "workspace"]
        with self._lock:  # the file and the memory change together
            self._read.pop(cwd, None)
            self._write(self.path_for(cwd), RuleFile(cwd=resolved, rules=stored))
            self._session_rules[resolved] = [rule for rule in rules if rule.scope == "session"]
            return self.rules(cwd)

    def add(self, cwd: str, rule: PermissionRule) -> None:
        """Add one rule to `cwd`'s (a workspace rule is written with the others, whole)."""
        resolved = os.path.realpath(cwd)
        with self._lock:
            if rule.scope == "session":
                self._session_rules.setdefault(resolved, []).append(rule)
                return
            stored = self.workspace_rules(cwd)
            self._read.pop(cwd, None)
            self._write(self.path_for(cwd), RuleFile(cwd=resolved, rules=[*stored, rule]))

    async def add_async(self, cwd: str, rule: PermissionRule) -> None:
        """`add`, its file I/O off the event loop."""
        await anyio.to_thread.run_sync(self.add, cwd, rule)

    async def rules_async(self, cwd: str) -> list[PermissionRule]:
        """`rules`, the file read off the event loop, and only when it changed since it was read.

        Each tool call the gate decides reads the rules, and a trip to a thread costs more than
        the decision: a few lstat calls on the loop (the rule file and its two directories) say
        whether the last read still holds. Any change of inode, size, time, mode or owner reads
        the file again, with every check."""
        resolved, stamp, kept = self._kept(cwd)
        if kept is None:
            kept = self._keep(cwd, stamp, await anyio.to_thread.run_sync(self.workspace_rules, cwd))
        return [*kept, *self._session_rules.get(resolved, [])]

    def rules_kept(self, cwd: str) -> list[PermissionRule]:
        """`rules`, read again only when the file changed since it was read (as `rules_async`,
        the read on the calling thread): a prompt's path checks its workspace's rules, and each
        system call there waits for the GIL while another thread holds it."""
        resolved, stamp, kept = self._kept(cwd)
        if kept is None:
            kept = self._keep(cwd, stamp, self.workspace_rules(cwd))
        return [*kept, *self._session_rules.get(resolved, [])]

    def _kept(self, cwd: str) -> tuple[str, Stamp, list[PermissionRule] | None]:
        """`cwd` resolved, its rule file's stamp now, and its rules if that read still holds."""
        resolved = os.path.realpath(cwd)  # once: each of its parts is a system call
        stamp = self._stamp(self.root / RULES_DIR / f"{key_of_resolved(resolved)}.json")
        kept = self._read.get(cwd)
        if kept is None or kept[0] != stamp or stamp is None:
            return resolved, stamp, None
        return resolved, stamp, kept[1]

    def _keep(self, cwd: str, stamp: Stamp, rules: list[PermissionRule]) -> list[PermissionRule]:
        if stamp is not None:
            if len(self._read) >= MAX_KEPT_READS:
                self._read.clear()
            self._read[cwd] = (stamp, rules)
        return rules

    def _stamp(self, path: Path) -> Stamp:
        """What a rule file and its directories are now (None: they cannot be looked at)."""
        stamps: list[tuple[int, ...] | None] = []
        for each in (self.root, path.parent, path):
            try:
                info = os.lstat(each)
            except FileNotFoundError:
                stamps.append(None)
                continue
            except OSError:
                return None
            stamps.append(
                (info.st_dev, info.st_ino, info.st_mode, info.st_uid, info.st_size, info.st_mtime_ns)
            )
        return tuple(stamps)

    async def replace_async(self, cwd: str, rules: Sequence[PermissionRule]) -> list[PermissionRule]:
        """`replace`, its file I/O off the event loop."""
        return await anyio.to_thread.run_sync(self.replace, cwd, rules)

    def _write(self, path: Path, content: RuleFile) -> None:
        """Write `content` whole: a 0600 temp file in the same 0700 dir, then rename over."""
        for directory in (self.root, path.parent):
            try:
                directory.mkdir(mode=0o700, parents=True)
            except FileExistsError:
                _check_trusted(directory, is_dir=True)
        data = content.model_dump_json(by_alias=True, exclude_none=True, indent=2).encode() + b"\n"
        write_atomically(path, data, prefix=".rules-")


def write_atomically(path: Path, data: bytes, *, prefix: str) -> None:
    """Write `data` whole or not at all: a 0600 temp file beside `path`, synced, renamed over it,
    and the directory synced (a crash leaves the old file or the new, never half of one)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _check_trusted(path: Path, *, is_dir: bool, info: os.stat_result | None = None) -> None:
    """Refuse a rule file or dir that is not ours, not what it should be, or writable by others."""
    what = "rule directory" if is_dir else "rule file"
    info = info if info is not None else os.lstat(path)
    kind_ok = stat.S_ISDIR(info.st_mode) if is_dir else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        raise RuleStoreError(f"{what} {path}: is not a {'directory' if is_dir else 'regular file'}")
    if info.st_uid != os.getuid():
        raise RuleStoreError(f"{what} {path}: is owned by uid {info.st_uid}, not by this user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuleStoreError(
            f"{what} {path}: is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"make it {'0700' if is_dir else '0600'}"
        )


def _parse(path: Path, raw: bytes, cwd: str) -> list[PermissionRule]:
    """The rules of a rule file's bytes, all or none."""
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RuleStoreError(f"rule file {path}: is not valid JSON ({exc})") from None
    try:
        content = RuleFile.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'file'}: {error['msg']}"
            for error in exc.errors()
        )
        raise RuleStoreError(f"rule file {path}: does not follow the rule schema ({problems})") from None
    if content.cwd != cwd:
        raise RuleStoreError(f"rule file {path}: is for {content.cwd!r}, not {cwd!r}")
    if any(rule.scope != "workspace" for rule in content.rules):
        raise RuleStoreError(f"rule file {path}: holds a session rule; only workspace rules are stored")
    return list(content.rules)
