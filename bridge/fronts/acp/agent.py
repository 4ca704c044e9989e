"""`pi-bridge acp`'s ACP agent: handlers for every ACP method, over the same run registry as the LSP front.

The protocol layer is the official SDK (`agent-client-protocol`): its schema models, its
JSON-RPC `Connection` and its agent router. Written here, where the SDK falls short:
- `_dispatch`: wrong params answer -32602 with one readable line per field (the SDK puts raw
  pydantic errors in `data`), and `session/cancel` sent as a request gets an answer.
- `direct`: a valid session/prompt is started as its frame is read, and a session/cancel stops
  its prompts there (the SDK's receive loop, then a task per frame, then its router, delayed a
  prompt on its way to pi); validated with the SDK's schema, answered as it would.
The process around it (stdio frames, start-up order, shutdown) is bridge/fronts/acp/serve.py; a plain
first `initialize` is answered before this module is even imported (bridge/fronts/acp/first_frame.py).
Handlers are thin: they validate, call the registry, and map (bridge/fronts/acp/mapping.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import anyio
import orjson
from acp import RequestError, schema
from acp.agent.router import build_agent_router
from acp.connection import Connection
from pydantic import ValidationError

from bridge.contract import (
    MAX_TITLE,
    CancelledRunData,
    CheckpointsParams,
    PermissionMode,
    RetryPolicy,
    RewindParams,
    RewindResult,
    RunParams,
    SandboxSettings,
    SessionHistory,
    WireModel,
)
from bridge.fronts.acp import mcp
from bridge.fronts.acp.approver import AcpApprover
from bridge.fronts.acp.client_requests import ClientRequests, client_answers
from bridge.fronts.acp.editor import AcpEditor
from bridge.fronts.acp.first_frame import initialize_result
from bridge.fronts.acp.mapping import (
    MODEL_OPTION,
    THOUGHT_OPTION,
    PromptMapper,
    Update,
    WireUpdate,
    config_options,
    history_updates,
    model_value,
    prompt_images,
    prompt_text,
    prompt_usage,
    stop_reason_of,
    terminal_content,
)
from bridge.fronts.acp.modes import MODE_OPTION, MODES, current_mode_update, mode_of, mode_option, mode_state
from bridge.fronts.acp.questioner import AcpQuestioner
from bridge.fronts.acp.toolbox import CommandAnnouncer
from bridge.fronts.lsp.writer import HIGH_WATER, LOW_WATER
from bridge.runs import history
from bridge.runs.registry import (
    CommandUsageError,
    NoLiveMode,
    OpenedConversation,
    OpenFailure,
    Run,
    RunRegistry,
    ShuttingDownError,
)
from bridge.runs.toolbox import Toolbox, ToolboxError

if TYPE_CHECKING:
    from bridge.fronts.acp.transport import StdioTransport

log = logging.getLogger(__name__)

# A failed run answers this JSON-RPC error code (server-defined range), its data says why.
RUN_FAILED: Final = -32000
# The levels a run's `thinking` takes (RunParams); pi may offer others, they are not passed on.
THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh")


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
    #: Its MCP servers (session/new's or session/load's, with the defaults), for every prompt.
    mcp_servers: mcp.Servers = field(default_factory=list)

    def options(self, mode: PermissionMode) -> list[schema.SessionConfigOptionSelect]:
        """The configOptions as they are now, the conversation's permission mode `mode` last."""
        return [*config_options(self.opened, self.model, self.thinking), mode_option(mode)]


class AcpAgent:
    """The ACP agent: handlers for every ACP method the bridge serves."""

    def __init__(self, registry: RunRegistry, *, default_cwd: str) -> None:
        self.adapter = registry.adapter
        self.default_cwd = default_cwd
        self.registry = registry
        self.sessions: dict[str, AcpSession] = {}
        self.retry: RetryPolicy | None = None
        #: `_meta.piBridge.sandbox` of initialize: every prompt's sandbox (None: the configuration's).
        self.sandbox: SandboxSettings | None = None
        #: `_meta.piBridge.mcpServers` of initialize: every session's MCP servers besides its own.
        self.mcp_defaults: mcp.Servers = list(registry.config.mcp_servers)
        self._prompts: dict[str, tuple[str, PromptMapper]] = {}
        # session/update frames, serialized, waiting for stdout; the flush marks between them.
        self._outbox: asyncio.Queue[bytes | asyncio.Event] = asyncio.Queue()
        self._outbox_bytes = 0
        self._pump_sending = False
        # Clear while the backlog (the outbox and stdout's buffer) is above the high-water mark.
        self._writable = asyncio.Event()
        self._writable.set()
        # Frames `direct` left to the SDK whose handler has not started yet.
        self._sdk_pending = 0
        self._served: set[asyncio.Task[None]] = set()
        self.conn: Connection | None = None
        self.transport: StdioTransport | None = None
        # What the client is asked (approvals, the agent's dialogs); ACP clients can answer, so
        # conversations start in `ask` unless the configuration says otherwise (contract).
        self.client = ClientRequests()
        gate = registry.gate
        gate.approver = AcpApprover(self.client, self._cwd_of)
        gate.questioner = AcpQuestioner(self.client)
        gate.editor = AcpEditor(self.client, self._show_terminal)
        gate.default_mode = registry.config.default_mode or "ask"
        self.toolbox = Toolbox(registry)
        self.commands = CommandAnnouncer(self.toolbox, self._send_update)

    def _send_update(self, session_id: str, update: Update) -> None:
        self._send_or_queue([(session_id, update)])

    def _show_terminal(self, session_id: str, tool_call_id: str, terminal_id: str) -> None:
        """The client's terminal a tool call runs in, shown in the call from now on."""
        for prompt_session, mapper in self._prompts.values():
            if prompt_session == session_id:
                mapper.terminals[tool_call_id] = terminal_id
        update = schema.ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=tool_call_id,
            status="in_progress",
            content=[terminal_content(terminal_id)],
        )
        self._send_update(session_id, update)

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        """Work that follows an answer (its updates after it), held until the connection closes."""
        task = asyncio.get_running_loop().create_task(work)
        self._served.add(task)
        task.add_done_callback(self._served.discard)

    # ------------------------------------------------------------------ the outgoing stream

    def on_messages(self, payloads: list[dict[str, Any]]) -> None:
        """The registry's sink: each run's pi/messages, as session/updates of its session."""
        updates: list[tuple[str, Update | WireUpdate]] = []
        for payload in payloads:
            entry = self._prompts.get(payload.get("runId", ""))
            if entry is None:
                continue
            session_id, mapper = entry
            updates.extend((session_id, update) for update in mapper.feed(payload))
        if updates:
            self._send_or_queue(updates)

    def _send_or_queue(self, updates: list[tuple[str, Update | WireUpdate]]) -> None:
        """Straight to stdout, in one write, while nothing waits ahead of them and stdout keeps
        up; else in line for the pump. (Through the pump, each update costs a loop trip.)"""
        frames = [_frame(_notification(s, u)) for s, u in updates]
        transport = self.transport
        in_line = self._pump_sending or not self._outbox.empty()
        if transport is None or in_line or not transport.write_now(b"".join(frames)):
            for frame in frames:
                self._queue(frame)
        self._note_backlog()

    def _queue(self, frame: bytes) -> None:
        self._outbox_bytes += len(frame)
        self._outbox.put_nowait(frame)

    async def pump(self) -> None:
        """Send the queued session/updates in order (a prompt's answer waits for its own)."""
        while True:
            item = await self._outbox.get()
            if isinstance(item, asyncio.Event):
                item.set()
                continue
            self._pump_sending = True
            try:
                await self._send_queued(item)
            finally:
                self._pump_sending = False

    async def _send_queued(self, frame: bytes) -> None:
        self._outbox_bytes -= len(frame)
        if self.transport is None:
            return
        try:
            await self.transport.write(frame)
        except (ConnectionError, OSError) as exc:
            log.info("session/update not sent: %s", exc)
        self._note_backlog()

    def _note_backlog(self) -> None:
        """The LSP front's backpressure policy (bridge/fronts/lsp/writer.py): above the high-water mark
        of bytes waiting for the client, runs stop reading their agent's output; below the
        low-water mark they read again. Nothing is dropped, and cancels need no writes."""
        transport = self.transport
        waiting = self._outbox_bytes + (transport.buffered_bytes if transport is not None else 0)
        if waiting > HIGH_WATER:
            self._writable.clear()
        elif waiting <= LOW_WATER:
            self._writable.set()

    async def wait_writable(self) -> None:
        """Wait while the backlog is above the high-water mark (the run registry's hook)."""
        if not self._writable.is_set():
            await self._writable.wait()

    async def flush(self) -> None:
        """Wait until every update queued so far is sent (at once when none waits in line)."""
        if self._outbox.empty() and not self._pump_sending:
            return
        mark = asyncio.Event()
        self._outbox.put_nowait(mark)
        await mark.wait()

    async def close(self) -> None:
        """Close the connection (its handlers' tasks end, and the prompts served as read)."""
        if self._served:
            await asyncio.wait(set(self._served), timeout=2.0)
        if self.conn is not None:
            await self.conn.close()

    # ------------------------------------------------------------------ lifecycle methods

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: Any,
    ) -> schema.InitializeResponse:
        """Capabilities; `_meta.piBridge.retry` sets the retry policy of every prompt,
        `_meta.piBridge.defaultMode` the mode every new conversation starts in,
        `_meta.piBridge.mcpServers` MCP servers every session gets besides its own,
        `_meta.piBridge.sandbox` how every prompt's commands are confined (a run's `sandbox`)."""
        given = kwargs.get("piBridge")
        ours: dict[str, Any] = given if isinstance(given, dict) else {}
        retry, default_mode, box = ours.get("retry"), ours.get("defaultMode"), ours.get("sandbox")
        if ours.get("mcpServers") is not None:
            self.mcp_defaults = mcp.servers_of(ours["mcpServers"], "_meta.piBridge.mcpServers")
        if retry is not None:
            try:
                self.retry = RetryPolicy.model_validate(retry)
            except ValidationError as exc:
                raise _invalid_params(exc) from None
        if default_mode is not None:
            self.registry.gate.default_mode = self._mode(default_mode, "_meta.piBridge.defaultMode")
        if box is not None:
            try:
                self.sandbox = SandboxSettings.model_validate(box)
            except ValidationError as exc:
                raise _invalid_params(exc) from None
        self.client.answers = client_answers(client_capabilities)
        # The same answer as a plain initialize gets by hand before the SDK is loaded.
        return schema.InitializeResponse.model_validate(initialize_result(protocol_version))

    def client_declared(self, capabilities: Any) -> None:
        """The `clientCapabilities` of an initialize answered before the SDK loaded."""
        self.client.answers = client_answers(capabilities)

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

    async def _open(self, cwd: str, session_id: str | None, servers: mcp.Servers) -> OpenedConversation:
        try:
            return await self.registry.open_conversation(cwd, session_id, servers)
        except OpenFailure as exc:
            error = exc.error
            raise RequestError(
                RUN_FAILED,
                error.message,
                {"kind": error.kind, "retryable": error.retryable, "stderr": error.stderr},
            ) from None
        except NoLiveMode as exc:
            raise RequestError(
                RUN_FAILED, f"the agent does not speak its live (rpc) mode: {exc}", {"kind": "spawn"}
            ) from None

    def _servers(self, given: Any) -> mcp.Servers:
        """A session's MCP servers (the SDK's models, checked raw already) with the defaults."""
        raw = [server.model_dump(mode="json", by_alias=True, exclude_none=True) for server in given or ()]
        return mcp.merged(mcp.servers_of(raw), self.mcp_defaults)

    def _remember(self, cwd: str, opened: OpenedConversation, servers: mcp.Servers) -> AcpSession:
        session = AcpSession(
            session_id=opened.session_id,
            cwd=cwd,
            opened=opened,
            model=model_value(opened.provider, opened.model),
            thinking=opened.thinking,
            mcp_servers=servers,
        )
        self.sessions[session.session_id] = session
        return session

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.NewSessionResponse:
        """A live conversation with its MCP servers; its id is pi's session id."""
        cwd = self._cwd(cwd)
        servers = self._servers(mcp_servers)
        session = self._remember(cwd, await self._open(cwd, None, servers), servers)
        mode = self.registry.gate.mode_of(session.session_id)
        self._later(self.commands.announce(session.session_id, cwd))
        return schema.NewSessionResponse(
            session_id=session.session_id, config_options=session.options(mode), modes=mode_state(mode)
        )

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.LoadSessionResponse:
        """Replay a stored session as updates, then keep it live (with these MCP servers) for its
        next prompt."""
        cwd = self._cwd(cwd)
        servers = self._servers(mcp_servers)
        stored = await history.read_session([self.adapter], session_id, self.registry.config.env)
        if not isinstance(stored, SessionHistory):
            raise RequestError(-32002, f"no session {session_id!r} was found", {"sessionId": session_id})
        for update in history_updates(stored, stored.cwd or cwd):
            self._queue(_frame(_notification(session_id, update)))
        self._note_backlog()
        await self.flush()
        session = self.sessions.get(session_id)
        if session is None:
            session = self._remember(cwd, await self._open(stored.cwd or cwd, session_id, servers), servers)
        session.mcp_servers = servers
        mode = self.registry.gate.mode_of(session_id)
        self._later(self.commands.announce(session_id, session.cwd))
        return schema.LoadSessionResponse(config_options=session.options(mode), modes=mode_state(mode))

    async def resume_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.ResumeSessionResponse:
        """Keep a stored session live (with these MCP servers) for its next prompt, without
        replaying it (session/load does)."""
        cwd = self._cwd(cwd)
        servers = self._servers(mcp_servers)
        session = self.sessions.get(session_id)
        if session is None:
            stored = await history.read_session([self.adapter], session_id, self.registry.config.env)
            if not isinstance(stored, SessionHistory):
                raise RequestError(-32002, f"no session {session_id!r} was found", {"sessionId": session_id})
            session = self._remember(cwd, await self._open(stored.cwd or cwd, session_id, servers), servers)
        session.mcp_servers = servers
        mode = self.registry.gate.mode_of(session_id)
        self._later(self.commands.announce(session_id, session.cwd))
        return schema.ResumeSessionResponse(config_options=session.options(mode), modes=mode_state(mode))

    async def set_title(self, session_id: str, title: str) -> dict[str, Any]:
        """session/set_title: the agent stores it; the client hears it as session_info_update."""
        try:
            renamed = await self.toolbox.rename(session_id, title)
        except ToolboxError as exc:
            code = -32002 if exc.not_found else RUN_FAILED
            raise RequestError(code, str(exc), {"sessionId": session_id}) from None
        update = schema.SessionInfoUpdate(session_update="session_info_update", title=renamed.title)
        if not self._prompts_of(session_id):
            self._send_update(session_id, update)  # a prompt streaming now tells it itself
        return {}

    def _prompts_of(self, session_id: str) -> list[str]:
        return [run_id for run_id, (sid, _) in self._prompts.items() if sid == session_id]

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        """session/delete: the session's prompts cancelled, its agent stopped, its file deleted."""
        try:
            await self.toolbox.delete(session_id)
        except ToolboxError as exc:
            raise RequestError(RUN_FAILED, str(exc), {"sessionId": session_id}) from None
        self.sessions.pop(session_id, None)
        self.commands.forget(session_id)
        return {}

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
        self.commands.forget(session_id)
        return schema.CloseSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> schema.SetSessionConfigOptionResponse:
        """Model or thought level, applied from the next prompt; the mode, from the next tool call."""
        session = self._session(session_id)
        options = session.options(self.registry.gate.mode_of(session_id))
        option = next((o for o in options if o.id == config_id), None)
        if option is None:
            raise RequestError(
                -32602, f"invalid params: configId: no option {config_id!r} (model, thought_level, mode)"
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
        elif config_id == MODE_OPTION:
            self._change_mode(session, value, config_option=True)
        mode = self.registry.gate.mode_of(session_id)
        return schema.SetSessionConfigOptionResponse(config_options=session.options(mode))

    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> schema.SetSessionModeResponse:
        """The conversation's permission mode, from its next tool call (a running prompt's too)."""
        self._change_mode(self._session(session_id), mode_id, config_option=False)
        return schema.SetSessionModeResponse()

    def _mode(self, value: object, field: str) -> PermissionMode:
        mode = mode_of(value)
        if mode is None:
            raise RequestError(-32602, f"invalid params: {field}: {value!r} is not one of {list(MODES)}")
        return mode

    def _change_mode(self, session: AcpSession, value: object, *, config_option: bool) -> None:
        """Set the mode and tell the client, in whichever shape it did not use to set it."""
        mode = self._mode(value, "value" if config_option else "modeId")
        self.registry.gate.set_mode(session.session_id, mode)
        updates: list[tuple[str, Update | WireUpdate]] = [(session.session_id, current_mode_update(mode))]
        if not config_option:
            options = schema.ConfigOptionUpdate(
                session_update="config_option_update", config_options=session.options(mode)
            )
            updates.append((session.session_id, options))
        self._send_or_queue(updates)

    def _cwd_of(self, session_id: str) -> str | None:
        session = self.sessions.get(session_id)
        return session.cwd if session is not None else None

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
        run = self._start_prompt(session, prompt)
        return await self._finish_prompt(session, run)

    def _start_prompt(
        self, session: AcpSession, prompt: list[Any], on_done: Callable[[Run], None] | None = None
    ) -> Run:
        text = prompt_text(prompt)
        if not text.strip():
            raise RequestError(
                -32602,
                "invalid params: prompt: no text, resource or resource_link content"
                " (an image goes with words)",
            )
        try:
            images = prompt_images(prompt)
        except ValueError as exc:
            raise RequestError(-32602, f"invalid params: {exc}") from None
        provider, _, model = session.model.rpartition("/")
        params = RunParams(
            prompt=text,
            cwd=session.cwd,
            session_id=session.session_id,
            provider=provider or None,
            model=model or None,
            thinking=session.thinking if session.thinking in THINKING_LEVELS else None,  # type: ignore[arg-type]
            live_thoughts=True,
            retry=self.retry,
            images=images or None,
            mcp_servers=list(session.mcp_servers),
            sandbox=self.sandbox,
        )
        try:
            run = self.registry.start(params, session.cwd, on_done=on_done)
        except ShuttingDownError as exc:
            raise RequestError(-32600, str(exc)) from None
        except CommandUsageError as exc:
            raise RequestError(-32602, f"invalid params: {exc}") from None
        self._prompts[run.run_id] = (session.session_id, PromptMapper(session.cwd))
        session.runs.append(run)
        return run

    async def _finish_prompt(self, session: AcpSession, run: Run) -> schema.PromptResponse:
        try:
            while not run.done.is_set():
                try:
                    await run.done.wait()
                except asyncio.CancelledError:
                    run.cancel.cancel("the ACP connection is closing")
                    with anyio.CancelScope(shield=True):
                        await run.done.wait()
                    raise
            await self.flush()
        finally:
            self._forget_prompt(session, run)
        return _prompt_answer(run)

    def _forget_prompt(self, session: AcpSession, run: Run) -> None:
        self._prompts.pop(run.run_id, None)
        if run in session.runs:
            session.runs.remove(run)
            if session.session_id in self.sessions:
                self._later(self.commands.announce(session.session_id, session.cwd))

    # ------------------------------------------------------------------ served as read

    def direct(self, message: dict[str, Any]) -> bool:
        """A frame as it is read, before the SDK's dispatch (a task later, then its router).

        - session/cancel (a notification) stops the session's prompts at once. When every
          earlier frame is in its handler already it is served whole here: the SDK's dispatch
          of it (a task, its schema, its router) ran ahead of the task that writes pi's
          `abort`, delaying the cancel. Else the SDK's dispatch sees to prompts that were
          still waiting for it.
        - session/prompt starts its run here, validated with the SDK's own schema, and is
          answered as the SDK's connection would (`_answer_of`): the prompt reaches pi a
          task sooner. Only while every earlier frame is in its handler already, so frames
          take effect in the order they came; anything invalid is left to the SDK path, which
          answers it as always.
        True when the frame was served here.
        """
        method = message.get("method")
        if method == "session/cancel" and "id" not in message:
            known = self._cancel_now(message.get("params"))
            if known and self._sdk_pending == 0:
                return True
        takes_prompt = method == "session/prompt" and "id" in message and self._sdk_pending == 0
        if takes_prompt and self._serve_prompt(message):
            return True
        if method is not None:
            self._sdk_pending += 1  # until its handler starts (`dispatched`)
        return False

    def dispatched(self) -> None:
        """The SDK started handling a frame that `direct` left to it."""
        self._sdk_pending = max(0, self._sdk_pending - 1)

    def _cancel_now(self, params: Any) -> bool:
        """Set the cancel tokens of the session's prompts; True when the session is known
        (a notification then needs nothing more: its prompts answer when their trees are gone)."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            return False
        self.client.settle(session.session_id)
        if not session.runs:
            log.info("session/cancel for %s: no prompt is running", session_id)
        for run in session.runs:
            run.cancel.cancel("cancelled by the client (session/cancel)")
        return True

    def _serve_prompt(self, message: dict[str, Any]) -> bool:
        try:
            request = schema.PromptRequest.model_validate(message.get("params"))
        except ValidationError:
            return False
        session = self.sessions.get(request.session_id)
        if session is None:
            return False
        msg_id = message["id"]
        try:
            self._start_prompt(
                session, request.prompt, on_done=lambda run: self._prompt_done(msg_id, session, run)
            )
        except RequestError:
            return False
        return True

    def _prompt_done(self, msg_id: Any, session: AcpSession, run: Run) -> None:
        """A prompt served as read has ended: its answer goes out now, right behind its updates
        when none waits in line (no task to wake first), else once they are sent."""
        transport = self.transport
        if transport is not None and not self._pump_sending and self._outbox.empty():
            self._forget_prompt(session, run)
            if transport.send_now(self._answer_of(msg_id, run)):
                return
        task = asyncio.get_running_loop().create_task(self._answer_later(msg_id, session, run))
        self._served.add(task)
        task.add_done_callback(self._served.discard)

    async def _answer_later(self, msg_id: Any, session: AcpSession, run: Run) -> None:
        await self.flush()
        self._forget_prompt(session, run)
        if self.transport is not None:
            try:
                await self.transport.send(self._answer_of(msg_id, run))
            except (ConnectionError, OSError) as exc:
                log.info("prompt answer not sent: %s", exc)

    def _answer_of(self, msg_id: Any, run: Run) -> dict[str, Any]:
        """As the SDK's connection answers a request: the result as its model dumps it, a
        RequestError as its error object, anything else as an internal error."""
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id}
        try:
            payload["result"] = _prompt_answer(run).model_dump(
                mode="json", by_alias=True, exclude_none=True, exclude_unset=True
            )
        except RequestError as exc:
            payload["error"] = exc.to_error_obj()
        except Exception as exc:  # the bridge never dies from a prompt
            log.exception("prompt %s failed inside the bridge", run.run_id)
            payload["error"] = RequestError.internal_error({"details": str(exc)}).to_error_obj()
        return payload

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """session/cancel: every prompt of the session stops (three-stage); each answers
        `cancelled` once its process tree is gone."""
        session = self.sessions.get(session_id)
        runs = list(session.runs) if session is not None else []
        self.client.settle(session_id)
        if not runs:
            log.info("session/cancel for %s: no prompt is running", session_id)
            return
        for run in runs:
            run.cancel.cancel("cancelled by the client (session/cancel)")
        for run in runs:
            await self.registry.cancel(run.run_id, "cancelled by the client (session/cancel)")

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.ForkSessionResponse:
        """session/fork: the conversation as it is now on a new session, the old one kept."""
        cwd = self._cwd(cwd)
        servers = self._session(session_id).mcp_servers  # the agent that forks has these
        try:
            forked = await self.toolbox.fork(session_id, cwd)
        except ToolboxError as exc:
            raise RequestError(RUN_FAILED, str(exc), {"sessionId": session_id}) from None
        self.sessions.pop(session_id, None)  # its agent serves the fork now
        session = self._remember(cwd, await self._open(cwd, forked, servers), servers)
        mode = self.registry.gate.mode_of(forked)
        self._later(self.commands.announce(forked, cwd))
        return schema.ForkSessionResponse(
            session_id=forked, config_options=session.options(mode), modes=mode_state(mode)
        )

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """`_pi/steer {sessionId, message}`: hand pi a steering message for the running prompt.
        `_pi/rewind_points {sessionId}` and `_pi/rewind {sessionId, checkpointId, restore,
        dryRun?, force?}`: pi/checkpoints and pi/rewind (protocol.md). The names other ACP agents
        share: `_session/steering {sessionId, prompt}` and `_session/rewind` (`_pi/rewind`'s)."""
        if method == "session/steering":
            return await self._steering(params)
        if method == "session/rewind":
            return {**await self._rewind_method("pi/rewind", params), "rewound": not params.get("dryRun")}
        if method in ("pi/rewind_points", "pi/rewind"):
            return await self._rewind_method(method, params)
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

    async def _steering(self, params: dict[str, Any]) -> dict[str, Any]:
        """`_session/steering`, as claude-agent-acp and codex-acp answer it: `{outcome: "injected"}`,
        or `{outcome: "promptRequired", reason: "noRunningTurn"}` when no prompt runs (the client
        sends a prompt instead); a steer the agent refuses is an error naming its reason."""
        try:
            asked = schema.PromptRequest.model_validate(params)
        except ValidationError as exc:
            raise _invalid_params(exc) from None
        text = prompt_text(asked.prompt)
        if not text.strip():
            raise RequestError(-32602, "invalid params: prompt: _session/steering needs some text")
        session = self._session(asked.session_id)
        if not session.runs:
            return {"outcome": "promptRequired", "reason": "noRunningTurn"}
        result = await self.registry.steer(session.runs[0].run_id, text)
        if not result.accepted:
            reason = result.reason
            raise RequestError(RUN_FAILED, f"the steer was not taken: {reason}", {"reason": reason})
        return {"outcome": "injected"}

    async def _rewind_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            if method == "pi/rewind_points":
                listed = CheckpointsParams.model_validate(params)
                result: WireModel = await self.toolbox.checkpoints(listed.session_id)
            else:
                wanted = RewindParams.model_validate(params)
                result = await self.toolbox.rewind(wanted)
        except ValidationError as exc:
            raise _invalid_params(exc) from None
        except ToolboxError as exc:
            code = -32002 if exc.not_found else RUN_FAILED
            raise RequestError(code, str(exc), {"sessionId": params.get("sessionId")}) from None
        if isinstance(result, RewindResult) and result.session_id != wanted.session_id:
            # a conversation rewind continues on a new session: the client prompts it from now on
            old = self.sessions.pop(wanted.session_id, None)
            cwd = old.cwd if old is not None else self.default_cwd
            servers = old.mcp_servers if old is not None else self._servers(None)
            self._remember(cwd, await self._open(cwd, result.session_id, servers), servers)
        answer: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return answer

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Unknown extension notifications are ignored, as JSON-RPC wants."""
        log.info("ignored extension notification _%s", method)


def _notification(session_id: str, update: Update | WireUpdate) -> dict[str, Any]:
    """The session/update notification carrying `update`."""
    if not isinstance(update, dict):
        update = update.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update},
    }


def _frame(message: dict[str, Any]) -> bytes:
    """One NDJSON frame."""
    return orjson.dumps(message) + b"\n"


def _prompt_answer(run: Run) -> schema.PromptResponse:
    answer = run.answer
    if isinstance(answer, CancelledRunData) and answer.unsent:
        # What the user sent into the prompt that never reached the model, for the client's input.
        meta = {"piBridge": {"unsent": answer.unsent}}
        return schema.PromptResponse(stop_reason="cancelled", field_meta=meta)
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


def _dispatcher(agent: AcpAgent) -> Any:
    router = build_agent_router(agent, use_unstable_protocol=True)  # type: ignore[arg-type]

    async def dispatch(method: str, params: Any, is_notification: bool) -> Any:
        agent.dispatched()
        if params is not None and not isinstance(params, dict):
            raise RequestError(-32602, "invalid params: params must be an object")
        mcp.check_params(method, params)
        if method in ("session/delete", "session/set_title") and not is_notification:
            return await _toolbox_request(agent, method, params or {})
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


async def _toolbox_request(agent: AcpAgent, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """session/delete and session/set_title, which the SDK's router does not route."""
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not 1 <= len(session_id) <= 256:
        raise RequestError(-32602, "invalid params: sessionId: a session id is required")
    if method == "session/delete":
        return await agent.delete_session(session_id)
    title = params.get("title")
    if not isinstance(title, str) or not 1 <= len(title) <= MAX_TITLE:
        raise RequestError(-32602, f"invalid params: title: a string of 1 to {MAX_TITLE} characters")
    return await agent.set_title(session_id, title)


def connect(agent: AcpAgent, transport: StdioTransport) -> Connection:
    """The SDK's connection serving `agent` over `transport` (run it with `main_loop`)."""
    conn = Connection(_dispatcher(agent), transport, listening=False)
    agent.conn = conn
    agent.client.conn = conn
    agent.transport = transport
    transport.direct = agent.direct
    transport.when_drained(agent._note_backlog)
    return conn
