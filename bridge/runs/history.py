"""The history requests (`pi/sessions`, `pi/session`): the agents' stored sessions, read off the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import anyio

from bridge.agents.seam import AgentAdapter, StoredHistory
from bridge.contract import SessionHistory, SessionNotFound, SessionsResult, SessionSummary


def _list_all(
    adapters: Sequence[AgentAdapter], cwd: str, limit: int, env: Mapping[str, str]
) -> list[SessionSummary]:
    found: list[SessionSummary] = []
    for adapter in adapters:
        found += (
            [s.model_copy(update={"agent": adapter.name}) for s in adapter.list_sessions(cwd, limit, env)]
            if isinstance(adapter, StoredHistory)
            else []
        )
    found.sort(key=lambda summary: summary.updated_at, reverse=True)
    return found[:limit]


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
) -> SessionsResult:
    """The sessions of `cwd` of every agent, newest first, each marked live or not."""
    sessions = await anyio.to_thread.run_sync(_list_all, adapters, cwd, limit, env)
    return SessionsResult(
        sessions=[summary.model_copy(update={"live": is_live(summary.session_id)}) for summary in sessions]
    )


async def read_session(
    adapters: Sequence[AgentAdapter], session_id: str, env: Mapping[str, str]
) -> SessionHistory | SessionNotFound:
    """One session's turns, from the first agent that has it, or `found: false`."""
    return await anyio.to_thread.run_sync(_read_any, adapters, session_id, env)
