"""Claude Code's stored sessions: where they live, whether a run resumes one, their history."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson
from pydantic import ValidationError

from bridge.agents.mapping import text_of
from bridge.agents.session_files import checkpoint_of, cut_back
from bridge.agents.values import RunOptions, SessionCheckpoint
from bridge.contract import SessionHistory, SessionNotFound, SessionSummary

log = logging.getLogger(__name__)

TITLE_CHARS: Final = 80
MAX_LINE_BYTES: Final = 32 * 1024 * 1024
MAX_TEXT_CHARS: Final = 64 * 1024
MAX_TURNS: Final = 500
CLIPPED: Final = "\n[… clipped by pi-bridge]"
NO_RESULT: Final = "the session holds no result of this tool call"
_SESSION_ID: Final = re.compile(r"^[A-Za-z0-9-]{1,128}$")


def config_dir(env: Mapping[str, str]) -> Path:
    """Claude Code's config dir: $CLAUDE_CONFIG_DIR, else ~/.claude."""
    merged = {**os.environ, **env}
    return Path(merged.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


def project_folder(cwd: str) -> str:
    """Claude Code's folder name for the sessions of one working directory."""
    return re.sub(r"[^A-Za-z0-9]", "-", os.path.normpath(cwd))


def find_session_file(session_id: str, env: Mapping[str, str]) -> Path | None:
    """The file of one session in any project folder; None if there is none."""
    if not _SESSION_ID.match(session_id):
        return None
    projects = config_dir(env) / "projects"
    if not projects.is_dir():
        return None
    for path in projects.glob(f"*/{session_id}.jsonl"):
        if path.is_file():
            return path
    return None


def session_exists(session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]) -> bool:
    """Whether the run resumes a stored session rather than start a new one."""
    if session_id:
        return find_session_file(session_id, env) is not None
    if continue_session:
        folder = config_dir(env) / "projects" / project_folder(cwd)
        return folder.is_dir() and any(folder.glob("*.jsonl"))
    return False


def checkpoint(options: RunOptions, env: Mapping[str, str]) -> SessionCheckpoint | None:
    """Where the session a run continues stands now: its file and size (`--continue`: the
    newest file of the cwd's folder). An id Claude Code could not name a file by: None."""
    session_id = options.session_id
    if session_id:
        if not _SESSION_ID.match(session_id):
            return None
        path = find_session_file(session_id, env)
        return checkpoint_of(path.stem, path) if path is not None else SessionCheckpoint(session_id)
    if options.continue_session:
        folder = config_dir(env) / "projects" / project_folder(options.cwd)
        files = []
        for path in folder.glob("*.jsonl") if folder.is_dir() else []:
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:
                continue
        if not files:
            return SessionCheckpoint(None)
        newest = max(files)[1]
        return checkpoint_of(newest.stem, newest)
    return SessionCheckpoint(None)


def rewind(
    checkpoint: SessionCheckpoint, announced: str | None, options: RunOptions, env: Mapping[str, str]
) -> RunOptions:
    """Cut a session back to `checkpoint` after a failed attempt; the next attempt's options.

    Measured (2.1.197): a failed turn appends its queue operations, the prompt, an assistant
    "API Error" entry (`isApiErrorMessage`) and bookkeeping lines. `--resume` drops the error
    entry but keeps the prompt, and joins it to the next prompt in one user message: each failed
    attempt adds its prompt once more. Cut back to its size before the run, the file resumes as
    the earlier turns alone. A session the run started is removed, and the next attempt starts
    it again under its id (`--session-id`, which refuses an id whose file exists).
    """
    if checkpoint.path is not None:
        failed = cut_back(checkpoint)
        if failed is not None:
            log.info("Claude Code session %s not cut back: %s", checkpoint.session_id, failed)
        return options
    started = find_session_file(announced, env) if announced else None
    if started is None:
        return options
    try:
        started.unlink()
    except OSError as exc:
        log.info("Claude Code session %s not removed: %s", announced, exc)
        return options
    return dataclasses.replace(
        options, session_id=announced, continue_session=False, resumed=False, new_session=True
    )


def bytes_before(data: bytes, mark_ms: int) -> int:
    """How many bytes of a session file precede its first entry stamped at or after `mark_ms`
    (milliseconds since the epoch): what a live Claude Code wrote before a prompt sent then.
    Entries are not in stamp order (an attachment may be stamped before the prompt it follows),
    so the cut is at the first late one; a line without a readable stamp never cuts."""
    offset = 0
    for line in data.splitlines(keepends=True):
        stamp = _stamp_ms(line)
        if stamp is not None and stamp >= mark_ms:
            return offset
        offset += len(line)
    return offset


def _stamp_ms(line: bytes) -> int | None:
    try:
        entry = orjson.loads(line)
        stamp = datetime.fromisoformat(entry["timestamp"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as stream:
        for line in stream:
            if len(line) > MAX_LINE_BYTES or not line.strip():
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a half-written last line, or garbage
            if isinstance(entry, dict) and not entry.get("isSidechain"):
                yield entry


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + CLIPPED


def _prompt_of(entry: dict[str, Any]) -> str | None:
    """The prompt of a `user` entry; None for one that carries tool results."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and not any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    ):
        return text_of(content)
    return None


def _iso(timestamp: Any, fallback: str) -> str:
    return timestamp if isinstance(timestamp, str) and timestamp else fallback


def summarize(path: Path) -> SessionSummary | None:
    """One session's listing entry; None if the file holds no conversation."""
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
    first_prompt: str | None = None
    title: str | None = None
    created: str | None = None
    cwd = ""
    count = 0
    for entry in _entries(path):
        kind = entry.get("type")
        if kind in ("summary", "custom-title"):
            named = entry.get("summary") or entry.get("customTitle")
            title = named if isinstance(named, str) and named else title
        if kind not in ("user", "assistant"):
            continue
        count += 1
        created = created or _iso(entry.get("timestamp"), mtime)
        cwd = cwd or str(entry.get("cwd") or "")
        if kind == "user" and first_prompt is None:
            first_prompt = _prompt_of(entry)
    if count == 0:
        return None
    name = title or " ".join((first_prompt or "").split()) or path.stem
    return SessionSummary(
        session_id=path.stem,
        cwd=cwd,
        title=name[:TITLE_CHARS],
        created_at=created or mtime,
        updated_at=mtime,
        message_count=count,
    )


def list_sessions(cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
    """The sessions of `cwd`, newest first."""
    folder = config_dir(env) / "projects" / project_folder(cwd)
    if not folder.is_dir():
        return []
    files: list[tuple[float, Path]] = []
    for path in folder.glob("*.jsonl"):
        try:
            files.append((path.stat().st_mtime, path))
        except OSError:
            continue
    summaries: list[SessionSummary] = []
    for _, path in sorted(files, reverse=True):
        try:
            summary = summarize(path)
        except (OSError, ValidationError) as exc:
            log.info("skipped Claude Code session file %s: %s", path.name, exc)
            continue
        if summary is not None:
            summaries.append(summary)
        if len(summaries) >= limit:
            break
    return summaries


class _HistoryBuilder:
    """The turns of one session file, built entry by entry as a live run would have streamed them."""

    def __init__(self) -> None:
        self.turns: deque[dict[str, Any]] = deque(maxlen=MAX_TURNS)
        self.total = 0
        self.cwd = ""
        self.title: str | None = None
        self.first_prompt: str | None = None
        self.open_calls: dict[str, tuple[dict[str, Any], str]] = {}  # tool_use id -> (its turn, tool name)

    def add(self, entry: dict[str, Any]) -> None:
        kind = entry.get("type")
        if kind in ("summary", "custom-title"):
            named = entry.get("summary") or entry.get("customTitle")
            self.title = named if isinstance(named, str) and named else self.title
            return
        message = entry.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            return
        self.cwd = self.cwd or str(entry.get("cwd") or "")
        if kind == "user":
            self._user(entry, message)
        elif self.turns:
            self._assistant(self.turns[-1], message)

    def _user(self, entry: dict[str, Any], message: dict[str, Any]) -> None:
        """A prompt opens a turn; a user entry of tool results closes the calls it answers."""
        prompt = _prompt_of(entry)
        if prompt is not None:
            self.first_prompt = self.first_prompt if self.first_prompt is not None else prompt
            self.total += 1
            self.turns.append({"prompt": _clip(prompt), "messages": []})
            return
        for block in message.get("content") or []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            found = self.open_calls.pop(str(block.get("tool_use_id")), None)
            if found is None:
                continue
            turn, name = found
            output = _clip(text_of(block.get("content")))
            call_id = str(block.get("tool_use_id"))
            if block.get("is_error") is True:
                content = {"toolCallId": call_id, "name": name, "error": output}
                turn["messages"].append({"type": "tool.failed", "content": content})
            else:
                content = {"toolCallId": call_id, "name": name, "output": output}
                turn["messages"].append({"type": "tool.completed", "content": content})

    def _assistant(self, turn: dict[str, Any], message: dict[str, Any]) -> None:
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            block_type = block.get("type")
            if block_type == "text" and isinstance(block.get("text"), str) and block["text"]:
                turn["messages"].append({"type": "assistant", "content": {"text": _clip(block["text"])}})
            elif block_type == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
                turn["messages"].append(
                    {"type": "assistant.thought", "content": {"text": _clip(block["thinking"])}}
                )
            elif block_type == "tool_use" and isinstance(block.get("id"), str):
                name = str(block.get("name", ""))
                arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
                call = {"toolCallId": block["id"], "name": name, "arguments": arguments}
                turn["messages"].append({"type": "tool.call", "content": call})
                self.open_calls[block["id"]] = (turn, name)

    def history(self, path: Path) -> SessionHistory:
        """The session as read; a call the file never answered is failed, as a cancelled run's is."""
        for call_id, (turn, name) in self.open_calls.items():
            content = {"toolCallId": call_id, "name": name, "error": NO_RESULT}
            turn["messages"].append({"type": "tool.failed", "content": content})
        name = self.title or " ".join((self.first_prompt or "").split()) or path.stem
        return SessionHistory.model_validate(
            {
                "sessionId": path.stem,
                "cwd": self.cwd,
                "title": name[:TITLE_CHARS],
                "turns": list(self.turns),
                **({"omittedTurns": self.total - len(self.turns)} if self.total > len(self.turns) else {}),
            }
        )


def read_history(path: Path) -> SessionHistory:
    """One session's turns, as a live run would have streamed them."""
    builder = _HistoryBuilder()
    for entry in _entries(path):
        builder.add(entry)
    return builder.history(path)


def read_session(session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
    """One session's history, or `found: false`."""
    path = find_session_file(session_id, env)
    if path is None:
        return SessionNotFound(session_id=session_id)
    try:
        return read_history(path)
    except (OSError, ValidationError) as exc:
        log.info("could not read Claude Code session %s: %s", session_id, exc)
        return SessionNotFound(session_id=session_id)
