"""The ACP sessions of one connection: each one's conversation, options and running prompts."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError, schema

from bridge.contract import PermissionMode, SandboxSettings, SessionHistory
from bridge.fronts.acp.request_errors import NOT_FOUND, RUN_FAILED, admin_failed
from bridge.fronts.acp.session import mcp
from bridge.fronts.acp.session.modes import MODES, mode_of, mode_option
from bridge.fronts.acp.updates import agent_config_options, config_options, model_value
from bridge.policy.gate import FrontPolicy
from bridge.runs import history
from bridge.runs.conversation_admin import ConversationAdmin, ConversationAdminError
from bridge.runs.registry import (
    AgentAdapter,
    AgentChoiceError,
    AgentOption,
    NoLiveMode,
    OpenedConversation,
    OpenFailure,
    Run,
    RunRegistry,
)
from bridge.runs.session_record import RecordedSession


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
    #: The agent's own modes and config options (an ACP agent's), offered after the bridge's.
    agent_options: tuple[AgentOption, ...] = ()
    #: What an ACP agent replayed as it loaded the session, until session/load sends it.
    replayed: SessionHistory | None = None

    def options(self, mode: PermissionMode) -> list[schema.SessionConfigOptionSelect]:
        """The configOptions as they are now: the bridge's (the conversation's permission mode
        `mode` last of them), then the agent's own."""
        bridge = [*config_options(self.opened, self.model, self.thinking), mode_option(mode)]
        return [*bridge, *agent_config_options(self.agent_options)]


class Sessions:
    """The sessions by id: opened, looked up, forgotten; and the checks of what opens one."""

    def __init__(
        self, registry: RunRegistry, policy: FrontPolicy, admin: ConversationAdmin, default_cwd: str
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.admin = admin
        self.default_cwd = default_cwd
        self.by_id: dict[str, AcpSession] = {}
        #: `_meta.piBridge.mcpServers` of initialize: every session's MCP servers besides its own.
        self.mcp_defaults: mcp.Servers = list(registry.config.mcp_servers)
        #: `_meta.piBridge.sandbox` of initialize: an agent that runs its own tools starts in it.
        self.sandbox: SandboxSettings | None = None

    def get(self, session_id: str) -> AcpSession | None:
        """The session of this id, if it is open."""
        return self.by_id.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self.by_id

    def forget(self, session_id: str) -> AcpSession | None:
        """Forget the session (its agent is closed, forked or rewound elsewhere)."""
        return self.by_id.pop(session_id, None)

    def known(self, session_id: str) -> AcpSession:
        """The open session of this id, or the error a client gets for an unknown one."""
        session = self.by_id.get(session_id)
        if session is None:
            raise RequestError(
                NOT_FOUND,
                f"no session {session_id!r}: open it with session/new or session/load",
                {"sessionId": session_id},
            )
        return session

    def cwd_of(self, session_id: str) -> str | None:
        """The session's working directory, if it is open."""
        session = self.by_id.get(session_id)
        return session.cwd if session is not None else None

    def mode_of(self, session_id: str) -> PermissionMode:
        """The conversation's permission mode."""
        return self.policy.mode_of(session_id)

    def checked_mode(self, value: object, field: str) -> PermissionMode:
        """A permission mode the client named, or -32602 naming `field`."""
        mode = mode_of(value)
        if mode is None:
            raise RequestError(-32602, f"invalid params: {field}: {value!r} is not one of {list(MODES)}")
        return mode

    @staticmethod
    def checked_cwd(cwd: str) -> str:
        """A session's cwd: an absolute path of an existing directory, or -32602."""
        if not (os.path.isabs(cwd) and os.path.isdir(cwd)):
            raise RequestError(
                -32602, f"invalid params: cwd: {cwd!r} is not an absolute path of an existing directory"
            )
        return cwd

    def servers(self, given: Any) -> mcp.Servers:
        """A session's MCP servers (the SDK's models, checked raw already) with the defaults."""
        raw = [server.model_dump(mode="json", by_alias=True, exclude_none=True) for server in given or ()]
        return mcp.merged(mcp.servers_of(raw), self.mcp_defaults)

    def checked_agent(self, meta: Any) -> str | None:
        """`_meta.piBridge.agent` of session/new: the name of an agent the bridge knows, or -32602."""
        ours = meta if isinstance(meta, dict) else {}
        agent, names = ours.get("agent"), self.registry.agents.agent_names()
        if meta is not None and not isinstance(meta, dict):
            raise RequestError(-32602, "invalid params: _meta.piBridge: an object")
        if agent is not None and agent not in names:
            message = f"invalid params: _meta.piBridge.agent: {agent!r} is not one of {', '.join(names)}"
            raise RequestError(-32602, message)
        return str(agent) if agent is not None else None

    def _agent(self, agent: str | None, session_id: str | None, cwd: str) -> AgentAdapter | None:
        """The agent named, else the session's own (None: the server's); -32602 if it cannot be."""
        if agent is None and session_id is None:
            return None
        try:
            return self.registry.agents.named_or_own(agent, session_id, cwd)
        except AgentChoiceError as exc:
            raise RequestError(-32602, f"invalid params: _meta.piBridge.agent: {exc}") from None

    async def open(
        self,
        cwd: str,
        session_id: str | None,
        servers: mcp.Servers,
        *,
        opened_in: str | None = None,
        agent: str | None = None,
    ) -> AcpSession:
        """A live conversation (a new one of `agent`, default the server's, or the stored
        `session_id` on its own agent, started in `opened_in`, default `cwd`) as an open session
        of `cwd`."""
        where = opened_in or cwd
        chosen = self._agent(agent, session_id, where)
        try:
            opened = await self.registry.open_conversation(where, session_id, servers, self.sandbox, chosen)
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
        session = AcpSession(
            session_id=opened.session_id,
            cwd=cwd,
            opened=dataclasses.replace(opened, replayed=None),  # held by the session until sent
            model=model_value(opened.provider, opened.model),
            thinking=opened.thinking,
            mcp_servers=servers,
            agent_options=opened.agent_options,
            replayed=opened.replayed,
        )
        self.by_id[session.session_id] = session
        return session

    async def stored(self, session_id: str) -> SessionHistory | RecordedSession:
        """The stored session of this id: one the bridge recorded (an ACP agent's, which replays
        it as it loads it), else the server agent's history; or -32002."""
        registry = self.registry
        recorded = registry.agents.recorded(session_id)
        if recorded is not None:
            return recorded
        found = await history.read_session([registry.adapter], session_id, registry.config.env)
        if not isinstance(found, SessionHistory):
            raise RequestError(NOT_FOUND, f"no session {session_id!r} was found", {"sessionId": session_id})
        return found

    async def revive(
        self,
        cwd: str,
        session_id: str,
        servers: mcp.Servers,
        stored: SessionHistory | RecordedSession | None = None,
        *,
        reload: bool = False,
    ) -> AcpSession:
        """The session open with these MCP servers: as it is, or its stored conversation opened.
        `reload`: a recorded session open now is loaded again, so that its agent replays it."""
        session = self.by_id.get(session_id)
        if session is not None and reload and isinstance(stored, RecordedSession):
            if session.runs:
                raise RequestError(-32602, f"session {session_id!r} has a running prompt: cancel it first")
            await self.registry.close_session(session_id)
            self.by_id.pop(session_id, None)
            session = None
        if session is None:
            stored = stored or await self.stored(session_id)
            session = await self.open(cwd, session_id, servers, opened_in=stored.cwd)
        session.mcp_servers = servers
        return session

    @staticmethod
    def take_replayed(session: AcpSession) -> SessionHistory | None:
        """What the session's agent replayed as it loaded it, handed out once."""
        replayed, session.replayed = session.replayed, None
        return replayed

    async def fork(self, session_id: str, cwd: str) -> AcpSession:
        """The conversation as it is now on a new session of `cwd`, the old one's agent serving it."""
        servers = self.known(session_id).mcp_servers  # the agent that forks has these
        try:
            forked = await self.admin.fork(session_id, cwd)
        except ConversationAdminError as exc:
            raise admin_failed(exc, session_id, not_found=False) from None
        self.by_id.pop(session_id, None)  # its agent serves the fork now
        return await self.open(cwd, forked, servers)

    async def set_agent_option(self, session: AcpSession, option_id: str, value: str) -> None:
        """One of the agent's own options, set through the agent (its answer kept)."""
        try:
            session.agent_options = await self.admin.set_agent_option(session.session_id, option_id, value)
        except ConversationAdminError as exc:
            raise admin_failed(exc, session.session_id, not_found=False) from None

    async def refresh_agent_options(self, session: AcpSession) -> bool:
        """The agent's own options as the agent last said them (it may change its mode itself);
        whether they changed."""
        now = await self.admin.agent_options(session.session_id)
        changed = bool(now) and now != session.agent_options
        if changed:
            session.agent_options = now
        return changed

    async def rename(self, session_id: str, title: str) -> str:
        """Store the session's title; the title as stored."""
        try:
            renamed = await self.admin.rename(session_id, title)
        except ConversationAdminError as exc:
            raise admin_failed(exc, session_id) from None
        return renamed.title

    async def delete(self, session_id: str) -> None:
        """Cancel the session's prompts, stop its agent, delete its file, and forget it."""
        try:
            await self.admin.delete(session_id)
        except ConversationAdminError as exc:
            raise admin_failed(exc, session_id, not_found=False) from None
        self.by_id.pop(session_id, None)

    async def listing(self, cwd: str) -> schema.ListSessionsResponse:
        """The stored sessions of `cwd`, newest first, each saying whether it is live."""
        registry = self.registry
        found = await history.list_sessions(
            [registry.adapter],
            cwd,
            1000,
            registry.config.env,
            registry.is_live_session,
            registry.agents.recorded_of(cwd),
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
