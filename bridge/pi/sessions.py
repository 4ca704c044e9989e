"""Where pi keeps its sessions, and whether a run will resume one (decided from files, not ids).

pi writes a session header with the requested id even for a NEW session (`--session-id`), so
"the header id equals the requested id" proves nothing; whether the session file existed before
the run does (pi-facts.md, "Sessions"). Layout: `<agent dir>/sessions/--<cwd with / as ->--/
<timestamp>_<id>.jsonl`, or `$PI_CODING_AGENT_SESSION_DIR/<timestamp>_<id>.jsonl`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# pi reads its settings, models and sessions from this dir (default ~/.pi/agent).
AGENT_DIR_ENV: Final = "PI_CODING_AGENT_DIR"


def sessions_root(env: Mapping[str, str]) -> tuple[Path, bool]:
    """(the folder pi stores sessions in, whether it is flat rather than one folder per cwd)."""
    flat = env.get("PI_CODING_AGENT_SESSION_DIR")
    if flat:
        return Path(flat).expanduser(), True
    agent_dir = env.get(AGENT_DIR_ENV) or str(Path.home() / ".pi" / "agent")
    return Path(agent_dir).expanduser() / "sessions", False


def cwd_folder(cwd: str) -> str:
    """pi's folder name for the sessions of one working directory (session-manager.js)."""
    return "--" + re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", os.path.normpath(cwd))) + "--"


def session_exists(session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]) -> bool:
    """Whether the run will resume an existing session rather than start a new one."""
    root, flat = sessions_root({**os.environ, **env})
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
