"""The bridge's record of the sessions it opened on ACP agents (runs/session_record.py): bounded,
private (0600), robust to a corrupt file, holding no secret, and what `_owner_of` asks first.

In-process, no agent started: the e2e tests (tests/e2e/test_acp_agent_sessions.py) load a recorded
session through a bridge, and through a restarted one.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from bridge import agents
from bridge.agents.seam import RecordedSessions
from bridge.config import BridgeConfig
from bridge.contract import SessionNotFound, SessionSummary
from bridge.runs import history, session_record
from bridge.runs.agent_choice import AgentChoice
from bridge.runs.session_record import RECORD_FILE, SessionRecord


def _written(record: SessionRecord) -> dict[str, dict[str, object]]:
    """The record's changes written, and the file read back, by session id."""
    record.write(record.changes() or [])
    assert record.path is not None
    return {entry["sessionId"]: entry for entry in json.loads(record.path.read_text())["sessions"]}


def test_the_record_keeps_the_most_recently_used_and_bounds_each_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_record, "MAX_RECORDED", 3)
    clock = iter(range(1000, 2000))
    monkeypatch.setattr(session_record.time, "time", lambda: float(next(clock)))
    record = SessionRecord.in_dir(tmp_path)
    for session in ("a", "b", "c", "a", "d"):  # "a" used again: "b" is the oldest
        record.note(session, "pi-acp", str(tmp_path), title=f"about {session}")
    record.note("e" * 300, "pi-acp", str(tmp_path))  # an id over the bound is no entry
    record.note("f", "pi-acp", "relative/dir")  # nor a relative folder
    written = _written(record)
    assert list(written) == ["c", "a", "d"]
    assert written["a"]["title"] == "about a" and written["a"]["lastUsed"] == 1003.0
    record.note("g", "pi-acp", str(tmp_path), title="word " * 100)
    title = str(_written(record)["g"]["title"])
    assert (
        title.startswith("word word")
        and session_record.MAX_TITLE - 5 < len(title) <= session_record.MAX_TITLE
    )

    again = SessionRecord.in_dir(tmp_path)  # a new bridge reads the same, newest first
    assert [entry.session_id for entry in again.of_cwd(str(tmp_path))] == ["g", "d", "a"]


def test_a_corrupt_record_is_a_clear_error_and_is_written_anew_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state" / RECORD_FILE
    path.parent.mkdir()
    path.write_bytes(b'{"version": 1, "sessions": [{"sessionId": "half')
    record = SessionRecord(path)
    with caplog.at_level(logging.ERROR, "bridge.runs.session_record"):
        assert record.get("half") is None
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert str(path) in caplog.text and "corrupt" in caplog.text

    old = os.umask(0)  # whatever the umask, the record is its owner's alone
    try:
        record.note("s1", "pi-acp", str(tmp_path))
        assert set(_written(record)) == {"s1"}
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [RECORD_FILE], "no temporary file left"

    # entries that are not sessions are left out, the rest kept
    body = {"version": 1, "sessions": [{"sessionId": 5}, json.loads(path.read_text())["sessions"][0]]}
    path.write_text(json.dumps(body))
    caplog.clear()
    with caplog.at_level(logging.ERROR, "bridge.runs.session_record"):
        assert SessionRecord(path).get("s1") is not None
    assert "1 entries are not sessions" in caplog.text


def test_a_recorded_session_holds_no_secret_and_its_agent_owns_it_after_a_restart(tmp_path: Path) -> None:
    secret = "sk-recorded-" + os.urandom(8).hex()
    config = BridgeConfig(env={"ACME_API_TOKEN": secret, "PLAIN_SETTING": "visible-" + os.urandom(4).hex()})
    pi_acp = agents.build_adapter("pi-acp")
    assert isinstance(pi_acp, RecordedSessions)
    choice = AgentChoice(agents.build_adapter("pi"), config, SessionRecord.in_dir(tmp_path))
    choice.adapter_named("pi-acp")
    choice.remember("s1", "pi-acp", str(tmp_path), prompt=f"deploy   with {secret} now")
    choice.remember("s2", "pi", str(tmp_path), prompt="pi keeps its own")  # pi's files say it: not recorded
    text = (tmp_path / RECORD_FILE).read_text()
    assert secret not in text and "ACME_API_TOKEN" not in text and config.env["PLAIN_SETTING"] not in text
    [entry] = json.loads(text)["sessions"]
    assert set(entry) == {"sessionId", "agent", "cwd", "title", "lastUsed"}
    assert (
        entry["sessionId"] == "s1"
        and entry["agent"] == "pi-acp"
        and entry["title"].startswith("deploy with ")
    )

    restarted = AgentChoice(agents.build_adapter("pi"), config, SessionRecord.in_dir(tmp_path))
    owner = restarted.named_or_own(None, "s1", str(tmp_path))
    assert owner is not None and owner.name == "pi-acp"
    assert owner.session_exists("s1", False, str(tmp_path), {}), "the agent knows the session again"


class _PiFiles:
    """An agent whose stored sessions hold the recorded one too (pi under pi-acp), and another."""

    name = "pi"

    def list_sessions(self, cwd: str, limit: int, env: object) -> list[SessionSummary]:
        def summary(session_id: str, updated: str) -> SessionSummary:
            return SessionSummary(
                session_id=session_id,
                cwd=cwd,
                title="pi's",
                created_at=updated,
                updated_at=updated,
                message_count=2,
            )

        return [summary("s1", "2099-01-01T00:00:00.000Z"), summary("p1", "2000-01-01T00:00:00.000Z")]

    def read_session(self, session_id: str, env: object) -> SessionNotFound:
        return SessionNotFound(session_id=session_id)


def test_recorded_sessions_are_listed_once_as_their_agents_newest_first(tmp_path: Path) -> None:
    record = SessionRecord(None)
    record.note("s1", "pi-acp", str(tmp_path), title="first words")
    listed = history._list_all([_PiFiles()], str(tmp_path), 10, {}, record.of_cwd(str(tmp_path)))  # type: ignore[list-item]
    assert [(s.session_id, s.agent, s.title) for s in listed] == [
        ("s1", "pi-acp", "first words"),
        ("p1", "pi", "pi's"),
    ]
    assert listed[0].updated_at.endswith("Z") and listed[0].message_count == 0


def test_a_deleted_session_leaves_the_record_and_another_bridges_write_does_not_bring_it_back(
    tmp_path: Path,
) -> None:
    choice = AgentChoice(agents.build_adapter("pi"), BridgeConfig(), SessionRecord.in_dir(tmp_path))
    choice.adapter_named("pi-acp")
    choice.remember("s1", "pi-acp", str(tmp_path), prompt="one")
    choice.remember("s2", "pi-acp", str(tmp_path), prompt="two")
    other = SessionRecord.in_dir(tmp_path)  # another bridge of this state dir, which read both
    assert other.get("s1") is not None

    assert choice.forget("s1") is True
    assert choice.forget("never-recorded") is False
    assert choice.named_or_own(None, "s1", str(tmp_path)) is None, "no agent owns it any more"
    kept = json.loads((tmp_path / RECORD_FILE).read_text())["sessions"]
    assert {e["sessionId"]: e.get("deleted", False) for e in kept} == {"s1": True, "s2": False}

    other.note("s3", "pi-acp", str(tmp_path), title="three")
    other.write(other.changes() or [])  # it still holds s1, as it was before the delete
    restarted = AgentChoice(agents.build_adapter("pi"), BridgeConfig(), SessionRecord.in_dir(tmp_path))
    assert restarted.recorded("s1") is None, "a deleted session came back"
    assert restarted.named_or_own(None, "s1", str(tmp_path)) is None
    assert restarted.recorded("s3") is not None and restarted.recorded("s2") is not None
    assert [e.session_id for e in restarted.recorded_of(str(tmp_path))] == ["s3", "s2"]
