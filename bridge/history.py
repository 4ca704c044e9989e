"""The history requests (`pi/sessions`, `pi/session`): the agent's stored sessions, read off the loop.

Reading session files is blocking I/O of unbounded size, so it runs in a worker thread; the
agent's reader (behind the adapter) knows the file format, the registry knows which are live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio

from bridge.agent import AgentAdapter
from bridge.contract import SessionHistory, SessionNotFound, SessionsResult


async def list_sessions(
    adapter: AgentAdapter,
    cwd: str,
    limit: int,
    env: Mapping[str, str],
    is_live: Callable[[str], bool],
) -> SessionsResult:
    """The sessions of `cwd`, newest first, each marked live or not."""
    sessions = await anyio.to_thread.run_sync(adapter.list_sessions, cwd, limit, env)
    return SessionsResult(
        sessions=[summary.model_copy(update={"live": is_live(summary.session_id)}) for summary in sessions]
    )


async def read_session(
    adapter: AgentAdapter, session_id: str, env: Mapping[str, str]
) -> SessionHistory | SessionNotFound:
    """One session's turns, or `found: false`."""
    return await anyio.to_thread.run_sync(adapter.read_session, session_id, env)
