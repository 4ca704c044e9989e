"""Driving `pi-bridge acp` through the official Python SDK's client side (`acp.spawn_agent_process`).

`AcpRecorder` is the ACP client: it records every session/update and refuses what an editor would
have to do for the agent (files, terminals, permissions): the bridge must never ask for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

from acp import RequestError, schema, spawn_agent_process
from acp.client.connection import ClientSideConnection

from tests.harness import BRIDGE, WAIT, bridge_env

Update = Any


class AcpRecorder:
    """An ACP client that records session/updates per session and lets tests wait on them."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Update]] = []
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Update, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    def of(self, session_id: str) -> list[Update]:
        """The updates of one session, in arrival order."""
        return [update for sid, update in self.updates if sid == session_id]

    def clear(self) -> None:
        """Forget what was recorded."""
        self.updates.clear()

    async def wait_for(self, predicate: Callable[[Update], bool], timeout: float = WAIT) -> Update:
        """The first recorded update matching `predicate` (waits for it)."""
        async with asyncio.timeout(timeout):
            while True:
                for _, update in self.updates:
                    if predicate(update):
                        return update
                self._changed.clear()
                await self._changed.wait()


def text_of(updates: list[Update], kind: str = "agent_message_chunk") -> str:
    """The text of every update of this kind, joined."""
    return "".join(u.content.text for u in updates if u.session_update == kind)


@contextlib.asynccontextmanager
async def acp_bridge(
    pi_agent_dir: Path, cwd: Path, *, args: tuple[str, ...] = (), log: Path | None = None
) -> AsyncIterator[tuple[ClientSideConnection, AcpRecorder, asyncio.subprocess.Process]]:
    """A `pi-bridge acp` with the real pi against the scripted model, connected and initialized."""
    env = bridge_env(
        {"PI_CODING_AGENT_DIR": str(pi_agent_dir), **({"PI_BRIDGE_LOG_FILE": str(log)} if log else {})}
    )
    recorder = AcpRecorder()
    async with spawn_agent_process(
        cast(Any, recorder),
        BRIDGE[0],
        *BRIDGE[1:],
        "acp",
        *args,
        env=env,
        cwd=cwd,
        transport_kwargs={"stderr": subprocess.DEVNULL},
        use_unstable_protocol=True,
    ) as (conn, process):
        answer = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        assert answer.protocol_version == 1
        yield conn, recorder, process


async def new_session(conn: ClientSideConnection, cwd: Path, model: str | None = None) -> str:
    """A new session in `cwd`, on scripted scenario `model` (e.g. "tool") when given."""
    session = await asyncio.wait_for(conn.new_session(cwd=str(cwd), mcp_servers=[]), WAIT)
    if model is not None:
        await asyncio.wait_for(
            conn.set_config_option(config_id="model", session_id=session.session_id, value=f"fake/{model}"),
            WAIT,
        )
    return session.session_id


async def prompt(conn: ClientSideConnection, session_id: str, text: str, timeout: float = WAIT) -> Any:
    """Send one text prompt and wait for its answer."""
    blocks: list[Any] = [schema.TextContentBlock(type="text", text=text)]
    return await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=blocks), timeout)
