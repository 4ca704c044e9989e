"""Driving `pi-bridge acp` through the official Python SDK's client side (`acp.spawn_agent_process`).

`AcpRecorder` is the ACP client: it records every session/update and every
session/request_permission (answered by `answer`: allow once unless a test says otherwise), and
refuses what an editor would have to do for the agent (files, terminals): the bridge never asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from acp import RequestError, schema, spawn_agent_process
from acp.client.connection import ClientSideConnection

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.tools.stdio_client import NDJSON, StdioPeer
from tests.support.env import BRIDGE, WAIT, bridge_env, bridge_pid

Update = Any
#: How the client answers one session/request_permission (its params): the raw result it sends.
PermissionAnswer = Callable[[schema.RequestPermissionRequest], Awaitable[Any]]


def choose(kind: str) -> PermissionAnswer:
    """Answer by choosing the offered option of `kind` (e.g. "reject_once")."""

    async def answer(request: schema.RequestPermissionRequest) -> Any:
        option = next(o for o in request.options if o.kind == kind)
        return {"outcome": {"outcome": "selected", "optionId": option.option_id}}

    return answer


class AcpRecorder:
    """An ACP client that records session/updates per session and lets tests wait on them."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Update]] = []
        self.permission_requests: list[schema.RequestPermissionRequest] = []
        #: Requests whose wait the bridge ended (their late answer went out all the same).
        self.withdrawn: list[schema.RequestPermissionRequest] = []
        self.answer: PermissionAnswer = choose("allow_once")
        #: elicitation/create requests (message, mode) and how they are answered (raw result).
        self.elicitations: list[tuple[str, Any]] = []
        self.elicit: Callable[[str, Any], Any] = lambda message, mode: {"action": "decline"}
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Update, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self,
        options: list[schema.PermissionOption],
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        **kwargs: Any,
    ) -> Any:
        request = schema.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=options)
        self.permission_requests.append(request)
        self._changed.set()
        try:
            return await self.answer(request)
        except asyncio.CancelledError:
            self.withdrawn.append(request)
            raise

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        self.elicitations.append((message, mode))
        return self.elicit(message, mode)

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

    async def wait_for_request(
        self, count: int = 1, timeout: float = WAIT
    ) -> schema.RequestPermissionRequest:
        """The `count`th session/request_permission (waits for it)."""
        async with asyncio.timeout(timeout):
            while len(self.permission_requests) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.permission_requests[count - 1]

    async def wait_for(self, predicate: Callable[[Update], bool], timeout: float = WAIT) -> Update:
        """The first recorded update matching `predicate` (waits for it)."""
        async with asyncio.timeout(timeout):
            while True:
                for _, update in self.updates:
                    if predicate(update):
                        return update
                self._changed.clear()
                await self._changed.wait()


def retry_notes(updates: list[Update]) -> list[int]:
    """The attempts announced by the bridge's retry notes (message chunks with `_meta.piBridge`)."""
    return [
        u.field_meta["piBridge"]["retrying"]["attempt"]
        for u in updates
        if u.session_update == "agent_message_chunk"
        and u.field_meta
        and "retrying" in u.field_meta["piBridge"]
    ]


def text_of(updates: list[Update], kind: str = "agent_message_chunk") -> str:
    """The text of every update of this kind, joined."""
    return "".join(u.content.text for u in updates if u.session_update == kind)


class BridgeProcess:
    """The bridge's process as a test sees it: its stdio, signals and exit through the process the
    client spawned (the fork server's launcher, which forwards them), and its pid for /proc."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stdin = process.stdin

    @property
    def pid(self) -> int:
        return bridge_pid(self.process.pid)

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait(self) -> int:
        return await self.process.wait()


@contextlib.asynccontextmanager
async def acp_bridge(
    pi_agent_dir: Path,
    cwd: Path,
    *,
    args: tuple[str, ...] = (),
    top_args: tuple[str, ...] = (),
    log: Path | None = None,
    extra_env: dict[str, str] | None = None,
    capabilities: schema.ClientCapabilities | None = None,
    meta: dict[str, Any] | None = None,
    recorder: AcpRecorder | None = None,
) -> AsyncIterator[tuple[ClientSideConnection, AcpRecorder, BridgeProcess]]:
    """A `pi-bridge acp` with the real pi against the scripted model, connected and initialized.
    `args` go to the `acp` subcommand, `top_args` before it (e.g. `--pi-command`); `extra_env`
    (e.g. another agent's configuration) is added to the bridge's environment; `capabilities`
    and `meta` go in the client's initialize; `recorder` is the client (a plain recorder if none)."""
    env = bridge_env(
        {
            "PI_CODING_AGENT_DIR": str(pi_agent_dir),
            STATE_DIR_ENV: tempfile.mkdtemp(prefix="pi-bridge-acp-state-"),  # rules and modes
            **({"PI_BRIDGE_LOG_FILE": str(log)} if log else {}),
            **(extra_env or {}),
        }
    )
    recorder = recorder if recorder is not None else AcpRecorder()
    async with spawn_agent_process(
        cast(Any, recorder),
        BRIDGE[0],
        *BRIDGE[1:],
        *top_args,
        "acp",
        *args,
        env=env,
        cwd=cwd,
        transport_kwargs={"stderr": None},  # inherited: pytest shows the bridge's log of a failing test
        use_unstable_protocol=True,
    ) as (conn, process):
        initialize = conn.initialize(protocol_version=1, client_capabilities=capabilities, **(meta or {}))
        answer = await asyncio.wait_for(initialize, WAIT)
        assert answer.protocol_version == 1
        yield conn, recorder, BridgeProcess(process)


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


class RawAcp(StdioPeer):
    """`pi-bridge acp` driven frame by frame (for hostile input): every stdout line is kept, and
    must be a JSON-RPC frame."""

    null_params = False
    dumps = staticmethod(lambda payload: json.dumps(payload).encode())  # ASCII: a lone surrogate escaped

    def __init__(
        self,
        pi_agent_dir: Path,
        cwd: Path,
        *,
        top_args: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        env = bridge_env(
            {
                "PI_CODING_AGENT_DIR": str(pi_agent_dir),
                STATE_DIR_ENV: tempfile.mkdtemp(prefix="pi-bridge-acp-state-"),
                **(extra_env or {}),
            }
        )
        super().__init__([*BRIDGE, *top_args, "acp"], framing=NDJSON, env=env, cwd=cwd, stderr=None)
        self.frames: list[dict[str, Any]] = []
        self.not_frames: list[bytes] = []
        self._cond = threading.Condition()
        self._next_id = 1000
        self.start_reader("raw-acp-reader")

    def received(self, now: float, bodies: list[bytes]) -> None:
        with self._cond:
            for line in bodies:
                try:
                    frame = json.loads(line)
                except ValueError:
                    frame = None
                if isinstance(frame, dict) and frame.get("jsonrpc") == "2.0":
                    self.frames.append(frame)
                else:
                    self.not_frames.append(line)
            self._cond.notify_all()

    def ended(self) -> None:
        with self._cond:
            super().ended()
            self._cond.notify_all()

    def send_line(self, data: bytes) -> None:
        """Write one line (a newline is added)."""
        self.send_bytes(data + b"\n")

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request and wait for the frame answering it."""
        msg_id, _ = self.send_request(method, params)
        return self.wait(lambda f: f.get("id") == msg_id and "method" not in f)

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT) -> dict[str, Any]:
        """The first frame matching `predicate` (waits for it)."""
        found: list[dict[str, Any]] = []

        def ready() -> bool:
            found[:] = [f for f in self.frames if predicate(f)][:1]
            return bool(found) or self.proc.poll() is not None

        with self._cond:
            self._cond.wait_for(ready, timeout)
        if not found:
            raise AssertionError(f"no matching frame within {timeout} s (exit code {self.proc.poll()})")
        return found[0]

    def null_id_errors(self) -> list[dict[str, Any]]:
        """Error answers to frames that had no usable id."""
        with self._cond:
            return [f for f in self.frames if f.get("id") is None and "error" in f]

    def close(self) -> int:
        """Close stdin and wait for the exit code (killed by pid if it hangs)."""
        self.resume_reading()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            return self.proc.wait(5)

    @property
    def pid(self) -> int:
        """The bridge's pid (not its fork server launcher's)."""
        return bridge_pid(self.proc.pid)
