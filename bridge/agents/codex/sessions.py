"""Codex's stored threads: one rollout file per thread under ``$CODEX_HOME/sessions/YYYY/MM/DD/``,
named ``rollout-<time>-<thread id>.jsonl``; found, checked and cut back for a retry."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bridge.agents.session_files import checkpoint_of, cut_back
from bridge.agents.values import RunOptions, SessionCheckpoint

log = logging.getLogger(__name__)

#: A thread id as Codex prints it (a UUID).
THREAD_ID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def codex_home(env: Mapping[str, str]) -> Path:
    """``CODEX_HOME``, else ``~/.codex``."""
    home = env.get("CODEX_HOME")
    if home:
        return Path(home)
    return Path(env.get("HOME") or str(Path.home())) / ".codex"


def find_thread_file(thread_id: str | None, env: Mapping[str, str]) -> Path | None:
    """The rollout file of thread ``thread_id``, None when it is not stored (or not an id)."""
    if not thread_id or not THREAD_ID.match(thread_id):
        return None
    folder = codex_home(env) / "sessions"
    if not folder.is_dir():
        return None
    found = sorted(folder.glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    return found[-1] if found else None


def checkpoint(options: RunOptions, env: Mapping[str, str]) -> SessionCheckpoint | None:
    """Where the thread a run continues stands now: its file and size; a new thread: none yet."""
    if not options.session_id:
        return SessionCheckpoint(None)
    path = find_thread_file(options.session_id, env)
    if path is None:
        return SessionCheckpoint(options.session_id)
    return checkpoint_of(options.session_id, path)


def rewind(
    checkpoint: SessionCheckpoint, announced: str | None, options: RunOptions, env: Mapping[str, str]
) -> RunOptions:
    """Cut a thread back to ``checkpoint`` after a failed attempt, so the next attempt shows the
    model the prompt once: the rollout is appended to, so its size before the run is the thread
    before it. A thread the failed attempt started is removed, and the next attempt starts anew."""
    if checkpoint.path is not None:
        failed = cut_back(checkpoint)
        if failed is not None:
            log.info("Codex thread %s not cut back: %s", checkpoint.session_id, failed)
        return options
    started = find_thread_file(announced, env)
    if started is not None:
        try:
            started.unlink()
        except OSError as exc:
            log.info("Codex thread %s not removed: %s", announced, exc)
    return dataclasses.replace(options, session_id=None, continue_session=False, resumed=False)
