"""Where pi keeps its sessions, and whether a run will resume one (decided from files, not ids)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bridge.process.spawn import environ_with

# pi reads its settings, models and sessions from this dir (default ~/.pi/agent).
AGENT_DIR_ENV: Final = "PI_CODING_AGENT_DIR"


def agent_dir(env: Mapping[str, str]) -> str:
    """pi's agent dir under `env`: its settings, models, auth and sessions."""
    home = env.get("HOME") or os.path.expanduser("~")
    return env.get(AGENT_DIR_ENV) or os.path.join(home, ".pi", "agent")


def sessions_root(env: Mapping[str, str]) -> tuple[Path, bool]:
    """(the folder pi stores sessions in, whether it is flat rather than one folder per cwd)."""
    flat = env.get("PI_CODING_AGENT_SESSION_DIR")
    if flat:
        return Path(flat).expanduser(), True
    return Path(agent_dir(env)).expanduser() / "sessions", False


def cwd_folder(cwd: str) -> str:
    """pi's folder name for the sessions of one working directory (session-manager.js)."""
    return "--" + re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", os.path.normpath(cwd))) + "--"


def session_exists(session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]) -> bool:
    """Whether the run will resume an existing session rather than start a new one."""
    root, flat = sessions_root(environ_with(env))
    if not root.is_dir():
        return False
    if session_id:
        if Path(session_id).is_file():
            return True
        pattern = f"*_{session_id}*.jsonl"
        return any(root.glob(pattern)) if flat else any(root.glob(f"*/{pattern}"))
    if continue_session:
        folder = root if flat else root / cwd_folder(cwd)
        return folder.is_dir() and any(folder.glob("*.jsonl"))
    return False


class AmbiguousSessionError(ValueError):
    """A session id prefix names more than one stored session."""


def _stored_files(session_id: str, env: Mapping[str, str]) -> list[Path]:
    root, flat = sessions_root(environ_with(env))
    if not root.is_dir():
        return []
    pattern = f"*_{glob_escape(session_id)}*.jsonl"
    return sorted(root.glob(pattern) if flat else root.glob(f"*/{pattern}"))


def glob_escape(text: str) -> str:
    """`text` as a literal inside a glob pattern (an id holding `*`, `?` or `[` matches only itself)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def stored_session_id(path: Path) -> str:
    """The session id of one of pi's session files (`<timestamp>_<id>.jsonl`)."""
    return path.name.rsplit(".", 1)[0].split("_", 1)[-1]


def resolve_session_id(session_id: str, env: Mapping[str, str]) -> str | None:
    """The full id of the stored session that `session_id` names (the id itself, a unique prefix of
    it, or its file's path); None when no stored session matches. Blocking I/O.

    Raises AmbiguousSessionError when a prefix matches several sessions.
    """
    if os.sep in session_id and Path(session_id).is_file():
        return stored_session_id(Path(session_id))
    ids = {stored_session_id(path) for path in _stored_files(session_id, env)}
    ids = {found for found in ids if found.startswith(session_id)}
    if session_id in ids:
        return session_id
    if len(ids) > 1:
        shown = ", ".join(sorted(ids)[:5])
        raise AmbiguousSessionError(f"session id prefix {session_id!r} matches {len(ids)} sessions: {shown}")
    return next(iter(ids), None)


def session_file(session_id: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """The file of the stored session with exactly this id, if pi has written it and it is a
    session of `cwd` (another project's session is never loaded for this one). Blocking I/O."""
    root, flat = sessions_root(environ_with(env))
    folder = root if flat else root / cwd_folder(cwd)
    for path in sorted(folder.glob(f"*_{glob_escape(session_id)}.jsonl")) if folder.is_dir() else []:
        if stored_session_id(path) != session_id:
            continue
        if flat and _header_cwd(path) != os.path.normpath(cwd):
            continue
        return str(path)
    return None


def _header_cwd(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            header = json.loads(handle.readline(64 * 1024) or b"{}")
    except (OSError, ValueError):
        return None
    found = header.get("cwd") if isinstance(header, dict) else None
    return os.path.normpath(found) if isinstance(found, str) else None
