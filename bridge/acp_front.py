"""`pi-bridge acp`: the Agent Client Protocol (v1) front, over the same run registry as the LSP front.

The protocol layer is the official SDK (`agent-client-protocol`): its schema models, its
JSON-RPC `Connection` and its agent router. Written here, where the SDK falls short:
- `_StdioTransport`: the SDK's stdio transport drops a non-JSON line with a log line; ACP clients
  get a JSON-RPC parse error (-32700) or invalid request (-32600) instead, and stdout carries
  nothing but frames;
- `_dispatch`: wrong params answer -32602 with one readable line per field (the SDK puts raw
  pydantic errors in `data`), and `session/cancel` sent as a request gets an answer;
- lifecycle: end of input and SIGTERM/SIGINT/SIGHUP stop every run (three-stage) before exit.
Handlers are thin: they validate, call the registry, and map (bridge/acp_mapping.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import orjson
from acp import PROTOCOL_VERSION, RequestError, schema
from acp.agent.router import build_agent_router
from acp.connection import Connection
from acp.stdio import stdio_streams
from pydantic import ValidationError

from bridge import __version__, history
from bridge.acp_mapping import (
    MODEL_OPTION,
    THOUGHT_OPTION,
    PromptMapper,
    Update,
    config_options,
    history_updates,
    model_value,
    prompt_text,
    prompt_usage,
    stop_reason_of,
)
from bridge.agent import AgentAdapter
from bridge.contract import CancelledRunData, RetryPolicy, RunParams, SessionHistory
from bridge.conversations import NoRpc, OpenedConversation, StartFailure
from bridge.process import become_subreaper, reap_orphans
from bridge.runs import BridgeConfig, Run, RunRegistry

log = logging.getLogger(__name__)

AGENT_NAME: Final = "pi-bridge"
# A failed run answers this JSON-RPC error code (server-defined range), its data says why.
RUN_FAILED: Final = -32000
MAX_LINE_BYTES: Final = 50 * 1024 * 1024


def _error_frame(code: int, message: str, msg_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


class _StdioTransport:
    """Newline-delimited JSON-RPC on stdin/stdout that answers malformed frames itself."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.closed = False

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionError("stdout is closed")
        self._writer.write(orjson.dumps(message) + b"\n")
        await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                await self._answer(_error_frame(-32700, f"parse error: not JSON ({exc})"))
                continue
            problem = _frame_problem(message)
            if problem is None:
                return message  # type: ignore[no-any-return]
            msg_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
                msg_id = None
            await self._answer(_error_frame(-32600, f"invalid request: {problem}", msg_id))

    async def _read_line(self) -> bytes | None:
        chunks: list[bytes] = []
        while True:
            try:
                chunks.append(await self._reader.readuntil(b"\n"))
                return b"".join(chunks)
            except asyncio.LimitOverrunError as exc:
                chunks.append(await self._reader.readexactly(exc.consumed))
            except asyncio.IncompleteReadError as exc:
                chunks.append(exc.partial)
                data = b"".join(chunks)
                return data or None

    async def _answer(self, frame: dict[str, Any]) -> None:
        try:
            await self.send(frame)
        except (ConnectionError, OSError):
            pass

    async def close(self) -> None:
        self.closed = True


def _frame_problem(message: Any) -> str | None:
    """Why a parsed frame is not a JSON-RPC 2.0 request, notification or response (None: it is)."""
    if not isinstance(message, dict):
        return f"a frame must be a JSON object, not {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'the frame must have "jsonrpc": "2.0"'
    msg_id = message.get("id")
    if "id" in message and (isinstance(msg_id, bool) or not isinstance(msg_id, (str, int, type(None)))):
        return "id must be a string, a number or null"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "method must be a non-empty string"
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return "params must be an object or an array"
        return None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return "the frame is neither a request, a notification nor a response"


def _invalid_params(exc: ValidationError) -> RequestError:
    problems = [
        {"field": ".".join(str(part) for part in error["loc"]) or "params", "message": error["msg"]}
        for error in exc.errors()
    ]
    text = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return RequestError(-32602, f"invalid params: {text}", {"errors": problems})


@dataclass(eq=False)
class AcpSession:
    """One ACP session: its conversation, the options of its next prompt, its prompts in order."""

    session_id: str
    cwd: str
    opened: OpenedConversation
    model: str
    thinking: str | None
    runs: list[Run] = field(default_factory=list)

    def options(self) -> list[schema.SessionConfigOptionSelect]:
        """The configOptions as they are now."""
        return config_options(self.opened, self.model, self.thinking)


class PiAcpAgent:
    """The ACP agent: handlers for every ACP method the bridge serves."""

    def __init__(self, adapter: AgentAdapter, config: BridgeConfig, *, default_cwd: str) -> None:
        self.adapter = adapter
        self.config = config
        self.default_cwd = default_cwd
        self.registry = RunRegistry(adapter, config, self._on_messages)
        self.sessions: dict[str, AcpSession] = {}
        self.retry: RetryPolicy | None = None
        self._prompts: dict[str, tuple[str, PromptMapper]] = {}
        self._outbox: asyncio.Queue[tuple[str, Update] | asyncio.Event] = asyncio.Queue()
        self.conn: Connection | None = None

    # ------------------------------------------------------------------ the outgoing stream

    def _on_messages(self, payloads: list[dict[str, Any]]) -> None:
        """The registry's sink: each run's pi/messages, as session/updates of its session."""
        for payload in payloads:
            entry = self._prompts.get(payload.get("runId", ""))
            if entry is None:
                continue
            session_id, mapper = entry
            for update in mapper.feed(payload):
                self._outbox.put_nowait((session_id, update))

    async def pump(self) -> None:
        """Send the queued session/updates in order (a prompt's answer waits for its own)."""
        while True:
            item = await self._outbox.get()
            if isinstance(item, asyncio.Event):
                item.set()
                continue
            session_id, update = item
            await self._send_update(session_id, update)

    async def _send_update(self, session_id: str, update: Update) -> None:
        if self.conn is None:
            return
        note = schema.SessionNotification(session_id=session_id, update=update)
        try:
            await self.conn.send_notification(
                "session/update", note.model_dump(mode="json", by_alias=True, exclude_none=True)
            )
        except (ConnectionError, OSError) as exc:
            log.info("session/update not sent: %s", exc)

    async def _flush(self) -> None:
        mark = asyncio.Event()
        self._outbox.put_nowait(mark)
        await mark.wait()

    # ------------------------------------------------------------------ lifecycle methods

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: Any,
    ) -> schema.InitializeResponse:
        """Capabilities; `_meta.piBridge.retry` sets the retry policy of every prompt."""
        retry = ((kwargs.get("piBridge") or {}) if isinstance(kwargs.get("piBridge"), dict) else {}).get(
            "retry"
        )
        if retry is not None:
            try:
                self.retry = RetryPolicy.model_validate(retry)
            except ValidationError as exc:
                raise _invalid_params(exc) from None
        return schema.InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=schema.AgentCapabilities(
                load_session=True,
                prompt_capabilities=schema.PromptCapabilities(
                    embedded_context=True, image=False, audio=False
                ),
                session_capabilities=schema.SessionCapabilities(
                    list=schema.SessionListCapabilities(), close=schema.SessionCloseCapabilities()
                ),
            ),
            agent_info=schema.Implementation(
                name=AGENT_NAME, title="pi (via pi-bridge)", version=__version__
            ),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> schema.AuthenticateResponse:
        """No auth methods: pi's own configuration carries the keys."""
        raise RequestError(-32602, f"unknown auth method {method_id!r}: pi-bridge offers none")

    # ------------------------------------------------------------------ sessions

    def _cwd(self, cwd: str) -> str:
        if not (os.path.isabs(cwd) and os.path.isdir(cwd)):
            raise RequestError(
                -32602, f"invalid params: cwd: {cwd!r} is not an absolute path of an existing directory"
            )
        return cwd

    async def _open(self, cwd: str, session_id: str | None) -> OpenedConversation:
        try:
            return await self.registry.open_conversation(cwd, session_id)
        except StartFailure as exc:
            error = exc.error
            raise RequestError(
                RUN_FAILED,
                error.message,
                {"kind": error.kind, "retryable": error.retryable, "stderr": error.stderr},
            ) from None
        except NoRpc as exc:
            raise RequestError(
                RUN_FAILED, f"the agent does not speak its live (rpc) mode: {exc}", {"kind": "spawn"}
            ) from None

    def _remember(self, cwd: str, opened: OpenedConversation) -> AcpSession:
        session = AcpSession(
            session_id=opened.session_id,
            cwd=cwd,
            opened=opened,
            model=model_value(opened.provider, opened.model),
            thinking=opened.thinking,
        )
        self.sessions[session.session_id] = session
        return session

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.NewSessionResponse:
        """A live conversation; its id is pi's session id."""
        cwd = self._cwd(cwd)
        session = self._remember(cwd, await self._open(cwd, None))
        return schema.NewSessionResponse(session_id=session.session_id, config_options=session.options())

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.LoadSessionResponse:
        """Replay a stored session as updates, then keep it live for its next prompt."""
        cwd = self._cwd(cwd)
        stored = await history.read_session([self.adapter], session_id, self.registry.config.env)
        if not isinstance(stored, SessionHistory):
            raise RequestError(-32002, f"no session {session_id!r} was found", {"sessionId": session_id})
        for update in history_updates(stored, stored.cwd or cwd):
            self._outbox.put_nowait((session_id, update))
        await self._flush()
        session = self.sessions.get(session_id)
        if session is None:
            session = self._remember(cwd, await self._open(stored.cwd or cwd, session_id))
        return schema.LoadSessionResponse(config_options=session.options())

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> schema.ListSessionsResponse:
        """The stored sessions of `cwd` (default: where the bridge runs), newest first."""
        where = self._cwd(cwd) if cwd else self.default_cwd
        found = await history.list_sessions(
            [self.adapter], where, 1000, self.registry.config.env, self.registry.is_live_session
        )
        return schema.ListSessionsResponse(
            sessions=[
                schema.SessionInfo(
                    session_id=s.session_id,
                    cwd=s.cwd,
                    title=s.title,
                    updated_at=s.updated_at,
                    field_meta={"live": s.live},
                )
                for s in found.sessions
            ]
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> schema.CloseSessionResponse:
        """End the session's live pi (its running prompt is cancelled first); the file stays."""
        self._session(session_id)
        await self.registry.close_session(session_id)
        self.sessions.pop(session_id, None)
        return schema.CloseSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> schema.SetSessionConfigOptionResponse:
        """Model or thought level, applied from the next prompt."""
        session = self._session(session_id)
        option = next((o for o in session.options() if o.id == config_id), None)
        if option is None:
            raise RequestError(
                -32602, f"invalid params: configId: no option {config_id!r} (model, thought_level)"
            )
        allowed = [
            choice.value for choice in option.options if isinstance(choice, schema.SessionConfigSelectOption)
        ]
        if value not in allowed:
            raise RequestError(-32602, f"invalid params: value: {value!r} is not one of {allowed}")
        if config_id == MODEL_OPTION:
            session.model = str(value)
        elif config_id == THOUGHT_OPTION:
            session.thinking = str(value)
        return schema.SetSessionConfigOptionResponse(config_options=session.options())

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(
                -32002,
                f"no session {session_id!r}: open it with session/new or session/load",
                {"sessionId": session_id},
            )
        return session

    # ------------------------------------------------------------------ prompts

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> schema.PromptResponse:
        """Run one prompt; a prompt sent while another of the session runs waits its turn."""
        session = self._session(session_id)
        text = prompt_text(prompt)
        if not text.strip():
            raise RequestError(-32602, "invalid params: prompt: no text, resource or resource_link content")
        provider, _, model = session.model.rpartition("/")
        params = RunParams(
            prompt=text,
            cwd=session.cwd,
            session_id=session_id,
            provider=provider or None,
            model=model or None,
            thinking=session.thinking
            if session.thinking in ("off", "minimal", "low", "medium", "high", "xhigh")
            else None,  # type: ignore[arg-type]
            live_thoughts=True,
            retry=self.retry,
        )
        run = self.registry.start(params, session.cwd)
        self._prompts[run.run_id] = (session_id, PromptMapper(session.cwd))
        session.runs.append(run)
        try:
            while not run.done.is_set():
                try:
                    await run.done.wait()
                except asyncio.CancelledError:
                    run.cancel.cancel("the ACP connection is closing")
                    with anyio.CancelScope(shield=True):
                        await run.done.wait()
                    raise
            await self._flush()
        finally:
            self._prompts.pop(run.run_id, None)
            if run in session.runs:
                session.runs.remove(run)
        return _prompt_answer(run)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """session/cancel: every prompt of the session stops (three-stage); each answers
        `cancelled` once its process tree is gone."""
        session = self.sessions.get(session_id)
        runs = list(session.runs) if session is not None else []
        if not runs:
            log.info("session/cancel for %s: no prompt is running", session_id)
            return
        for run in runs:
            run.cancel.cancel("cancelled by the client (session/cancel)")
        for run in runs:
            await self.registry.cancel(run.run_id, "cancelled by the client (session/cancel)")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """`_pi/steer {sessionId, message}`: hand pi a steering message for the running prompt."""
        if method != "pi/steer":
            raise RequestError.method_not_found(f"_{method}")
        session_id, message = params.get("sessionId"), params.get("message")
        if not isinstance(session_id, str) or not isinstance(message, str) or not message:
            raise RequestError(-32602, "invalid params: _pi/steer needs sessionId and a non-empty message")
        session = self._session(session_id)
        if not session.runs:
            return {"accepted": False, "reason": "no prompt of this session is running"}
        result = await self.registry.steer(session.runs[0].run_id, message)
        return {"accepted": result.accepted, "reason": result.reason}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Unknown extension notifications are ignored, as JSON-RPC wants."""
        log.info("ignored extension notification _%s", method)


def _prompt_answer(run: Run) -> schema.PromptResponse:
    answer = run.answer
    if isinstance(answer, CancelledRunData) or answer is None:
        return schema.PromptResponse(stop_reason="cancelled")
    if answer.status == "failed":
        error = answer.error
        if error is None:
            raise RequestError(RUN_FAILED, "the run failed", {"kind": "internal", "retryable": False})
        raise RequestError(
            RUN_FAILED,
            error.message,
            {
                "kind": error.kind,
                "retryable": error.retryable,
                "stderr": error.stderr,
                "attempts": answer.attempts,
            },
        )
    usage = prompt_usage(answer.usage.model_dump(by_alias=True) if answer.usage else None)
    return schema.PromptResponse(
        stop_reason=stop_reason_of(answer.stop_reason),
        usage=usage,
        field_meta={"piBridge": {"attempts": answer.attempts}},
    )


def _dispatcher(agent: PiAcpAgent) -> Any:
    router = build_agent_router(agent, use_unstable_protocol=True)  # type: ignore[arg-type]

    async def dispatch(method: str, params: Any, is_notification: bool) -> Any:
        if params is not None and not isinstance(params, dict):
            raise RequestError(-32602, "invalid params: params must be an object")
        if method == "session/cancel" and not is_notification:
            session_id = (params or {}).get("sessionId")
            if not isinstance(session_id, str) or session_id not in agent.sessions:
                raise RequestError(-32002, f"no session {session_id!r}", {"sessionId": session_id})
            if not agent.sessions[session_id].runs:
                raise RequestError(-32602, f"session {session_id!r} has no running prompt to cancel")
            await agent.cancel(session_id)
            return None
        try:
            return await router(method, params, is_notification)
        except ValidationError as exc:
            raise _invalid_params(exc) from None

    return dispatch


async def serve_acp(agent: PiAcpAgent) -> int:
    """Serve ACP on this process's stdin/stdout until end of input or a signal; stop runs first."""
    loop = asyncio.get_running_loop()
    reader, writer = await stdio_streams(limit=MAX_LINE_BYTES)
    sys.stdout = sys.stderr  # stdout belongs to the protocol: a stray print must not corrupt it
    transport = _StdioTransport(reader, writer)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    subreaper = become_subreaper()
    log.info("pi-bridge acp serving on stdio (pid %d, subreaper=%s)", os.getpid(), subreaper)
    conn = Connection(_dispatcher(agent), transport, listening=False)
    agent.conn = conn
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(agent.registry.serve)
            agent.registry.prime_live(agent.default_cwd)
            tasks.start_soon(agent.pump)
            tasks.start_soon(_reap_periodically)

            async def read_until_eof() -> None:
                await conn.main_loop()
                stop.set()

            tasks.start_soon(read_until_eof)
            await stop.wait()
            agent.registry.close()
            with anyio.CancelScope(shield=True):
                await agent.registry.stop_all("the ACP connection ended")
                with anyio.move_on_after(2.0):
                    await agent._flush()
                await conn.close()
            tasks.cancel_scope.cancel()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        reap_orphans()
    return 0


async def _reap_periodically() -> None:
    """Adopted orphans (we are a subreaper) must be reaped or they linger as zombies."""
    while True:
        await anyio.sleep(1.0)
        reap_orphans()


def run_acp(adapter: AgentAdapter, config: BridgeConfig) -> int:
    """Serve ACP on stdio; returns the exit code."""
    return asyncio.run(serve_acp(PiAcpAgent(adapter, config, default_cwd=os.getcwd())))
