"""`pi-bridge acp`'s ACP agent: thin handlers for every ACP method, over the same run registry as
the LSP front; the protocol layer is the official SDK (`agent-client-protocol`)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from acp import RequestError, schema
from acp.agent.router import build_agent_router
from acp.connection import Connection
from pydantic import BaseModel, ValidationError

from bridge.contract import MAX_TITLE, RetryPolicy, SandboxSettings, SessionHistory
from bridge.fronts.acp.approver import AcpApprover
from bridge.fronts.acp.client_requests import ClientRequests, client_answers
from bridge.fronts.acp.command_announcer import CommandAnnouncer
from bridge.fronts.acp.editor import AcpEditor
from bridge.fronts.acp.first_frame import API_KEY_VARS, ENV_AUTH_ID, TERMINAL_AUTH_ID, initialize_result
from bridge.fronts.acp.outbox import Outbox, SessionUpdate
from bridge.fronts.acp.questioner import AcpQuestioner
from bridge.fronts.acp.request_errors import NOT_FOUND, invalid_params
from bridge.fronts.acp.session import mcp
from bridge.fronts.acp.session.extensions import Extensions
from bridge.fronts.acp.session.fast_path import FastPath
from bridge.fronts.acp.session.modes import MODE_OPTION, current_mode_update, mode_state
from bridge.fronts.acp.session.open_sessions import AcpSession, Sessions
from bridge.fronts.acp.session.prompts import CANCELLED, Prompts
from bridge.fronts.acp.updates import AGENT_PREFIX, MODEL_OPTION, THOUGHT_OPTION, history_updates
from bridge.policy.gate import FrontPolicy
from bridge.runs.conversation_admin import ConversationAdmin
from bridge.runs.registry import RunRegistry

if TYPE_CHECKING:
    from bridge.fronts.acp.transport import StdioTransport

log = logging.getLogger(__name__)

_Model = TypeVar("_Model", bound=BaseModel)


class AcpAgent:
    """The ACP agent: handlers for every ACP method the bridge serves."""

    def __init__(self, registry: RunRegistry, policy: FrontPolicy, *, default_cwd: str) -> None:
        self.registry = registry
        self.policy = policy
        self.admin = ConversationAdmin(registry)
        self.outbox = Outbox()
        self.sessions = Sessions(registry, policy, self.admin, default_cwd)
        # What the client is asked (approvals, the agent's dialogs); ACP clients can answer, so
        # conversations start in `ask` unless the configuration says otherwise.
        self.client = ClientRequests()
        self.prompts = Prompts(registry, self.sessions, self.outbox, self.client, self._announce)
        self.fast_path = FastPath(self.sessions, self.prompts, self.outbox, self._later)
        self.extensions = Extensions(registry, self.admin, self.sessions)
        self.commands = CommandAnnouncer(self.admin, self.outbox.send_one)
        self.conn: Connection | None = None
        self._served: set[asyncio.Task[None]] = set()
        policy.attach_client(
            AcpApprover(self.client, self.sessions.cwd_of),
            AcpQuestioner(self.client),
            AcpEditor(self.client, self.prompts.show_terminal),
        )
        policy.default_mode = registry.config.default_mode or "ask"

    # ------------------------------------------------------------------ the serving process's hooks

    def on_messages(self, payloads: list[dict[str, Any]]) -> None:
        """The registry's sink: each run's messages, as session/updates of its session."""
        self.prompts.on_messages(payloads)

    async def wait_writable(self) -> None:
        """Wait while the backlog is above the high-water mark (the run registry's hook)."""
        await self.outbox.wait_writable()

    async def pump(self) -> None:
        """Send the queued session/updates in order, for as long as the connection lasts."""
        await self.outbox.pump()

    async def flush(self) -> None:
        """Wait until every update queued so far is sent."""
        await self.outbox.flush()

    async def close(self) -> None:
        """Close the connection (its handlers' tasks end, and the prompts served as read)."""
        if self._served:
            await asyncio.wait(set(self._served), timeout=2.0)
        if self.conn is not None:
            await self.conn.close()

    def client_declared(self, capabilities: Any) -> None:
        """The `clientCapabilities` of an initialize answered before the SDK loaded."""
        self.client.answers = client_answers(capabilities)

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        """Work that follows an answer (its updates after it), held until the connection closes."""
        task = asyncio.get_running_loop().create_task(work)
        self._served.add(task)
        task.add_done_callback(self._served.discard)

    def _announce(self, session: AcpSession) -> None:
        """The session's commands, and the agent's own options when it changed them itself,
        sent after the answer at hand."""
        self._later(self.commands.announce(session.session_id, session.cwd))
        self._later(self._agent_options_changed(session))

    async def _agent_options_changed(self, session: AcpSession) -> None:
        """A config_option_update when the agent's own options are not what the client was told."""
        if await self.sessions.refresh_agent_options(session):
            mode = self.sessions.mode_of(session.session_id)
            update = schema.ConfigOptionUpdate(
                session_update="config_option_update", config_options=session.options(mode)
            )
            self.outbox.send_one(session.session_id, update)

    # ------------------------------------------------------------------ lifecycle methods

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: Any,
    ) -> schema.InitializeResponse:
        """Capabilities; `_meta.piBridge` sets what every prompt and session gets (`_take_settings`)."""
        self._take_settings(kwargs.get("piBridge"))
        self.client.answers = client_answers(client_capabilities)
        # The same answer as a plain initialize gets by hand before the SDK is loaded.
        return schema.InitializeResponse.model_validate(initialize_result(protocol_version))

    def _take_settings(self, given: Any) -> None:
        """`_meta.piBridge` of initialize: `retry` sets the retry policy of every prompt,
        `defaultMode` the mode every new conversation starts in, `mcpServers` MCP servers every
        session gets besides its own, `sandbox` how every prompt's commands are confined."""
        ours: dict[str, Any] = given if isinstance(given, dict) else {}
        retry, default_mode, box = ours.get("retry"), ours.get("defaultMode"), ours.get("sandbox")
        if ours.get("mcpServers") is not None:
            self.sessions.mcp_defaults = mcp.servers_of(ours["mcpServers"], "_meta.piBridge.mcpServers")
        if retry is not None:
            self.prompts.retry = _validated(RetryPolicy, retry)
        if default_mode is not None:
            field = "_meta.piBridge.defaultMode"
            self.policy.default_mode = self.sessions.checked_mode(default_mode, field)
        if box is not None:
            self.prompts.sandbox = self.sessions.sandbox = _validated(SandboxSettings, box)

    async def authenticate(self, method_id: str, **kwargs: Any) -> schema.AuthenticateResponse:
        """The methods initialize lists: an API key must be in the environment the client gave;
        pi's own login has run in the client's terminal already, and pi must hold what it stored."""
        if method_id == ENV_AUTH_ID:
            if not any(os.environ.get(name) for name in API_KEY_VARS):
                names = ", ".join(API_KEY_VARS)
                raise RequestError(-32000, f"no API key in pi-bridge's environment: set one of {names}")
            return schema.AuthenticateResponse()
        if method_id == TERMINAL_AUTH_ID:
            if not await self.admin.holds_a_login():
                raise RequestError(
                    -32000, "pi holds no login yet: run the login in a terminal (`pi-bridge acp --login`)"
                )
            return schema.AuthenticateResponse()
        known = f"{ENV_AUTH_ID!r} or {TERMINAL_AUTH_ID!r}"
        raise RequestError(-32602, f"unknown auth method {method_id!r}: pi-bridge offers {known}")

    # ------------------------------------------------------------------ sessions

    def _state(self, session: AcpSession) -> dict[str, Any]:
        """The session's configOptions and modes, as a session's answers carry them."""
        mode = self.sessions.mode_of(session.session_id)
        return {"config_options": session.options(mode), "modes": mode_state(mode)}

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.NewSessionResponse:
        """A live conversation with its MCP servers, on the agent `_meta.piBridge.agent` names
        (default the server's); its id is the agent's session id."""
        cwd, servers = self.sessions.checked_cwd(cwd), self.sessions.servers(mcp_servers)
        agent = self.sessions.checked_agent(kwargs.get("piBridge"))
        session = await self.sessions.open(cwd, None, servers, agent=agent)
        self._announce(session)
        return schema.NewSessionResponse(session_id=session.session_id, **self._state(session))

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.LoadSessionResponse:
        """Replay a stored session as updates, then keep it live (with these MCP servers) for its
        next prompt; an ACP agent's is opened first, and replayed as its agent replayed it."""
        cwd, servers = self.sessions.checked_cwd(cwd), self.sessions.servers(mcp_servers)
        stored = await self.sessions.stored(session_id)
        if isinstance(stored, SessionHistory):
            await self._replay(session_id, stored, cwd)
        session = await self.sessions.revive(cwd, session_id, servers, stored, reload=True)
        replayed = self.sessions.take_replayed(session)
        if replayed is not None and not isinstance(stored, SessionHistory):
            await self._replay(session_id, replayed, cwd)
        elif not isinstance(stored, SessionHistory):
            log.warning("session/load %s: no process of its agent loaded it: nothing replayed", session_id)
        self._announce(session)
        return schema.LoadSessionResponse(**self._state(session))

    async def _replay(self, session_id: str, stored: SessionHistory, cwd: str) -> None:
        """A stored session's turns as session/updates, sent before the answer."""
        self.outbox.queue([(session_id, update) for update in history_updates(stored, stored.cwd or cwd)])
        await self.outbox.flush()

    async def resume_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.ResumeSessionResponse:
        """Keep a stored session live (with these MCP servers) for its next prompt, without
        replaying it (session/load does)."""
        cwd, servers = self.sessions.checked_cwd(cwd), self.sessions.servers(mcp_servers)
        session = await self.sessions.revive(cwd, session_id, servers)
        self.sessions.take_replayed(session)  # not replayed: the client has the conversation
        self._announce(session)
        return schema.ResumeSessionResponse(**self._state(session))

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.ForkSessionResponse:
        """session/fork: the conversation as it is now on a new session, the old one kept."""
        session = await self.sessions.fork(session_id, self.sessions.checked_cwd(cwd))
        self._announce(session)
        return schema.ForkSessionResponse(session_id=session.session_id, **self._state(session))

    async def set_title(self, session_id: str, title: str) -> dict[str, Any]:
        """session/set_title: the agent stores it; the client hears it as session_info_update."""
        renamed = await self.sessions.rename(session_id, title)
        if not self.prompts.of_session(session_id):  # a prompt streaming now tells it itself
            self.outbox.send_one(
                session_id, schema.SessionInfoUpdate(session_update="session_info_update", title=renamed)
            )
        return {}

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        """session/delete: the session's prompts cancelled, its agent stopped, its file deleted."""
        await self.sessions.delete(session_id)
        self.commands.forget(session_id)
        return {}

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> schema.ListSessionsResponse:
        """The stored sessions of `cwd` (default: where the bridge runs), newest first."""
        return await self.sessions.listing(
            self.sessions.checked_cwd(cwd) if cwd else self.sessions.default_cwd
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> schema.CloseSessionResponse:
        """End the session's live pi (its running prompt is cancelled first); the file stays."""
        self.sessions.known(session_id)
        await self.registry.close_session(session_id)
        self._forget(session_id)
        return schema.CloseSessionResponse()

    def _forget(self, session_id: str) -> None:
        self.sessions.forget(session_id)
        self.commands.forget(session_id)

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> schema.SetSessionConfigOptionResponse:
        """Model or thought level, applied from the next prompt; the mode, from the next tool call;
        an agent's own option (`agent.<id>`), set by the agent, whose answer it is."""
        session = self.sessions.known(session_id)
        if config_id.startswith(AGENT_PREFIX):
            await self._set_agent_option(session, config_id, value)
        else:
            self._set_option(session, config_id, value)
        mode = self.sessions.mode_of(session_id)
        return schema.SetSessionConfigOptionResponse(config_options=session.options(mode))

    async def _set_agent_option(self, session: AcpSession, config_id: str, value: str | bool) -> None:
        """One of the agent's own options, when `value` is one of its choices."""
        own = config_id.removeprefix(AGENT_PREFIX)
        option = next((o for o in session.agent_options if o.option_id == own), None)
        if option is None:
            raise RequestError(-32602, f"invalid params: configId: the agent has no option {own!r}")
        allowed = [choice.value for choice in option.choices]
        if value not in allowed:
            raise RequestError(-32602, f"invalid params: value: {value!r} is not one of {allowed}")
        await self.sessions.set_agent_option(session, own, str(value))

    def _set_option(self, session: AcpSession, config_id: str, value: str | bool) -> None:
        """One of the session's configOptions set, when `value` is one of its choices."""
        option = next(
            (o for o in session.options(self.sessions.mode_of(session.session_id)) if o.id == config_id), None
        )
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

    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> schema.SetSessionModeResponse:
        """The conversation's permission mode, from its next tool call (a running prompt's too)."""
        self._change_mode(self.sessions.known(session_id), mode_id, config_option=False)
        return schema.SetSessionModeResponse()

    def _change_mode(self, session: AcpSession, value: object, *, config_option: bool) -> None:
        """Set the mode and tell the client, in whichever shape it did not use to set it."""
        mode = self.sessions.checked_mode(value, "value" if config_option else "modeId")
        self.policy.set_mode(session.session_id, mode)
        updates: list[SessionUpdate] = [(session.session_id, current_mode_update(mode))]
        if not config_option:
            options = schema.ConfigOptionUpdate(
                session_update="config_option_update", config_options=session.options(mode)
            )
            updates.append((session.session_id, options))
        self.outbox.send(updates)

    # ------------------------------------------------------------------ prompts

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> schema.PromptResponse:
        """Run one prompt; a prompt sent while another of the session runs waits its turn."""
        session = self.sessions.known(session_id)
        return await self.prompts.finish(session, self.prompts.start(session, prompt))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """session/cancel: every prompt of the session stops (three-stage); each answers
        `cancelled` once its process tree is gone."""
        for run in self.prompts.stop(session_id):
            await self.registry.cancel(run.run_id, CANCELLED)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The extension methods (`_pi/steer`, `_pi/rewind_points`, `_pi/rewind`,
        `_session/steering`, `_session/rewind`): see session/extensions.py."""
        return await self.extensions.call(method, params)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Unknown extension notifications are ignored, as JSON-RPC wants."""
        log.info("ignored extension notification _%s", method)


def _validated(model: type[_Model], value: Any) -> _Model:
    """`value` as `model`, or -32602 naming each wrong field."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise invalid_params(exc) from None


def _dispatcher(agent: AcpAgent) -> Any:
    router = build_agent_router(agent, use_unstable_protocol=True)  # type: ignore[arg-type]

    async def dispatch(method: str, params: Any, is_notification: bool) -> Any:
        agent.fast_path.dispatched()
        if params is not None and not isinstance(params, dict):
            raise RequestError(-32602, "invalid params: params must be an object")
        mcp.check_params(method, params)
        if method in ("session/delete", "session/set_title") and not is_notification:
            return await _admin_request(agent, method, params or {})
        if method == "session/cancel" and not is_notification:
            session_id = (params or {}).get("sessionId")
            session = agent.sessions.get(session_id) if isinstance(session_id, str) else None
            if session is None:
                raise RequestError(NOT_FOUND, f"no session {session_id!r}", {"sessionId": session_id})
            if not session.runs:
                raise RequestError(-32602, f"session {session_id!r} has no running prompt to cancel")
            await agent.cancel(session.session_id)
            return None
        try:
            return await router(method, params, is_notification)
        except ValidationError as exc:
            raise invalid_params(exc) from None

    return dispatch


async def _admin_request(agent: AcpAgent, method: str, params: dict[str, Any]) -> dict[str, Any]:
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
    agent.outbox.transport = transport
    transport.direct = agent.fast_path.direct
    transport.when_drained(agent.outbox.note_backlog)
    return conn
