"""The history requests (`pi/sessions`, `pi/session`): the agents' stored sessions, read off the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import anyio

from bridge.agents.seam import AgentAdapter, StoredHistory
from bridge.contract import SessionHistory, SessionNotFound, SessionsResult, SessionSummary
from bridge.runs.session_record import RecordedSession


def _list_all(
    adapters: Sequence[AgentAdapter],
    cwd: str,
    limit: int,
    env: Mapping[str, str],
    recorded: Sequence[RecordedSession],
) -> list[SessionSummary]:
    found = [_summary(entry) for entry in recorded]
    known = {summary.session_id for summary in found}  # the record's agent owns it (pi-acp's is pi's too)
    for adapter in adapters:
        listed = adapter.list_sessions(cwd, limit, env) if isinstance(adapter, StoredHistory) else []
        found += [s.model_copy(update={"agent": adapter.name}) for s in listed if s.session_id not in known]
    found.sort(key=lambda summary: summary.updated_at, reverse=True)
    return found[:limit]


def _summary(entry: RecordedSession) -> SessionSummary:
    """A recorded session as listed: when it was last used; its messages are the agent's (0)."""
    used = datetime.fromtimestamp(entry.last_used, UTC).isoformat(timespec="milliseconds")
    used = used.replace("+00:00", "Z")
    return SessionSummary(
        session_id=entry.session_id,
        cwd=entry.cwd,
        title=entry.title,
        created_at=used,
        updated_at=used,
        message_count=0,
        agent=entry.agent,
    )


def _read_any(
    adapters: Sequence[AgentAdapter], session_id: str, env: Mapping[str, str]
) -> SessionHistory | SessionNotFound:
    for adapter in adapters:
        if not isinstance(adapter, StoredHistory):
            continue
        history = adapter.read_session(session_id, env)
        if isinstance(history, SessionHistory):
            return history.model_copy(update={"agent": adapter.name})
    return SessionNotFound(session_id=session_id)


async def list_sessions(
    adapters: Sequence[AgentAdapter],
    cwd: str,
    limit: int,
    env: Mapping[str, str],
    is_live: Callable[[str], bool],
    recorded: Sequence[RecordedSession] = (),
) -> SessionsResult:
    """The sessions of `cwd` of every agent, and those `recorded` of agents that keep theirs
    their own way, newest first, each marked live or not."""
    sessions = await anyio.to_thread.run_sync(_list_all, adapters, cwd, limit, env, recorded)
    return SessionsResult(
        sessions=[summary.model_copy(update={"live": is_live(summary.session_id)}) for summary in sessions]
    )


async def read_session(
    adapters: Sequence[AgentAdapter], session_id: str, env: Mapping[str, str]
) -> SessionHistory | SessionNotFound:
    """One session's turns, from the first agent that has it, or `found: false`."""
    return await anyio.to_thread.run_sync(_read_any, adapters, session_id, env)
