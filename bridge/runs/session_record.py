"""The bridge's record of the sessions it opened on agents that keep theirs where it cannot read
them (ACP agents): which agent owns each, so one closed, or opened before a restart, opens again."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

RECORD_FILE: Final = "agent-sessions.json"
#: The sessions kept (the most recently used): the record stays small however long it is used.
MAX_RECORDED: Final = 500
#: A record file larger than this is not read (a record of MAX_RECORDED entries is far smaller).
MAX_RECORD_BYTES: Final = 4 * 1024 * 1024
#: The longest id, agent name, cwd and title an entry keeps (a longer one is not an entry of ours).
MAX_ID: Final = 256
MAX_NAME: Final = 128
MAX_CWD: Final = 4096
MAX_TITLE: Final = 80
_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class RecordedSession:
    """One session the bridge opened on an agent: its id, agent, folder, title and last use."""

    session_id: str
    agent: str
    cwd: str
    title: str = ""
    #: Seconds since the epoch.
    last_used: float = 0.0
    #: The agent's own id of the session, when it is not `session_id`.
    own_id: str | None = None
    #: Deleted (at `last_used`): kept so that another bridge's older entry of it, merged into
    #: the file, does not bring it back.
    deleted: bool = False


def title_of(prompt: str) -> str:
    """A session's title from its first prompt: whitespace collapsed, cut short."""
    return " ".join(prompt.split())[:MAX_TITLE].rstrip()


class SessionRecord:
    """The record, read once from `path` (None: kept in memory only); its `changes` are written
    whole by `write`, merged with what another bridge wrote meanwhile."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, RecordedSession] | None = None
        self.dirty = False

    @classmethod
    def in_dir(cls, state_dir: Path) -> SessionRecord:
        """The record of the bridge's state dir."""
        return cls(state_dir / RECORD_FILE)

    def get(self, session_id: str) -> RecordedSession | None:
        """The recorded session of this id, if any."""
        entry = self._all().get(session_id)
        return entry if entry is not None and not entry.deleted else None

    def of_cwd(self, cwd: str) -> list[RecordedSession]:
        """The recorded sessions of `cwd`, the most recently used first."""
        here = os.path.realpath(cwd)
        found = [entry for entry in self._all().values() if entry.cwd == here and not entry.deleted]
        return sorted(found, key=lambda entry: entry.last_used, reverse=True)

    def note(
        self, session_id: str, agent: str, cwd: str, *, title: str = "", own_id: str | None = None
    ) -> None:
        """The session was opened or prompted now in `cwd` (kept resolved); a title once it has
        one is kept."""
        entries = self._all()
        before = entries.pop(session_id, None)
        entry = RecordedSession(
            session_id=session_id,
            agent=agent,
            cwd=os.path.realpath(cwd) if os.path.isabs(cwd) else cwd,  # a relative one is no entry
            title=(before.title if before is not None and before.title else title_of(title)),
            last_used=time.time(),
            own_id=own_id if own_id != session_id else None,
        )
        if _valid(entry):
            entries[session_id] = entry
            _bound(entries)
            self.dirty = True

    def forget(self, session_id: str) -> bool:
        """The session was deleted: it leaves the record (its entry marked deleted, now, so the
        file's merge keeps it out); whether it was recorded."""
        entries = self._all()
        entry = entries.get(session_id)
        if entry is None or entry.deleted:
            return False
        entries[session_id] = dataclasses.replace(entry, title="", last_used=time.time(), deleted=True)
        self.dirty = True
        return True

    def changes(self) -> list[RecordedSession] | None:
        """The entries to write, when any changed since they were last taken (None: none)."""
        if self.path is None or not self.dirty:
            return None
        self.dirty = False
        return list(self._all().values())

    def write(self, entries: list[RecordedSession]) -> None:
        """Write `entries` (0600, the file replaced whole), merged with those another bridge of
        this state dir wrote since; touches nothing but the file (it runs off the loop). An error
        is logged, never raised."""
        if self.path is None:
            return
        merged = {entry.session_id: entry for entry in entries}
        for session_id, theirs in _read(self.path).items():
            ours = merged.get(session_id)
            if ours is None or theirs.last_used > ours.last_used:
                merged[session_id] = theirs
        _bound(merged)
        body = {"version": _VERSION, "sessions": [_entry_json(entry) for entry in merged.values()]}
        try:
            _write_private(self.path, json.dumps(body, ensure_ascii=False).encode())
        except OSError as exc:
            log.error("the record of agent sessions %s could not be written: %s", self.path, exc)

    def _all(self) -> dict[str, RecordedSession]:
        if self._entries is None:
            self._entries = _read(self.path) if self.path is not None else {}
        return self._entries


def _valid(entry: RecordedSession) -> bool:
    return (
        0 < len(entry.session_id) <= MAX_ID
        and 0 < len(entry.agent) <= MAX_NAME
        and 0 < len(entry.cwd) <= MAX_CWD
        and os.path.isabs(entry.cwd)
        and len(entry.title) <= MAX_TITLE
        and (entry.own_id is None or 0 < len(entry.own_id) <= MAX_ID)
    )


def _bound(entries: dict[str, RecordedSession]) -> None:
    """Keep the MAX_RECORDED most recently used, in order of use."""
    ordered = sorted(entries.values(), key=lambda entry: entry.last_used)[-MAX_RECORDED:]
    entries.clear()
    entries.update((entry.session_id, entry) for entry in ordered)


def _entry_json(entry: RecordedSession) -> dict[str, Any]:
    fields = asdict(entry)
    return {
        "sessionId": fields["session_id"],
        "agent": fields["agent"],
        "cwd": fields["cwd"],
        "title": fields["title"],
        "lastUsed": fields["last_used"],
        **({"ownId": fields["own_id"]} if fields["own_id"] else {}),
        **({"deleted": True} if fields["deleted"] else {}),
    }


def _entry(raw: Any) -> RecordedSession | None:
    """An entry of the file, or None for anything that is not one."""
    if not isinstance(raw, dict):
        return None
    strings = [raw.get(key) for key in ("sessionId", "agent", "cwd", "title")]
    last_used, own_id = raw.get("lastUsed"), raw.get("ownId")
    if not all(isinstance(value, str) for value in strings) or not isinstance(last_used, int | float):
        return None
    if own_id is not None and not isinstance(own_id, str):
        return None
    session_id, agent, cwd, title = (str(value) for value in strings)
    entry = RecordedSession(
        session_id, agent, cwd, title, float(last_used), own_id, raw.get("deleted") is True
    )
    return entry if _valid(entry) else None


def _read(path: Path) -> dict[str, RecordedSession]:
    """The file's entries; a missing file is none, a corrupt one none and a clear error logged."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.error("the record of agent sessions %s cannot be read (%s): none is known", path, exc)
        return {}
    try:
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"it is over {MAX_RECORD_BYTES} bytes")
        parsed = json.loads(data)
        if not isinstance(parsed, dict) or parsed.get("version") != _VERSION:
            raise ValueError(f"it is not a version {_VERSION} record")
        listed = parsed.get("sessions")
        if not isinstance(listed, list):
            raise ValueError("it has no list of sessions")
    except ValueError as exc:
        log.error(
            "the record of agent sessions %s is corrupt (%s): none is known, and it is written anew",
            path,
            exc,
        )
        return {}
    entries = [entry for entry in map(_entry, listed) if entry is not None]
    if len(entries) < len(listed):
        left_out = len(listed) - len(entries)
        log.error("the record of agent sessions %s: %d entries are not sessions, left out", path, left_out)
    found = {entry.session_id: entry for entry in entries}
    _bound(found)
    return found


def _write_private(path: Path, body: bytes) -> None:
    """Write `body` to `path` whole (a temporary file renamed over it), readable by its owner only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask
            handle.write(body)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
