"""Which agent runs a prompt: the one it names, else its session's, else the default."""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

import anyio

from bridge import agents
from bridge.agents import seam
from bridge.agents.seam import AgentAdapter, RecordedSessions
from bridge.config import BridgeConfig
from bridge.contract import AgentInfo
from bridge.policy.redact import Redactor
from bridge.runs.request import RunRequest
from bridge.runs.session_record import RecordedSession, SessionRecord, title_of

log = logging.getLogger(__name__)

MAX_REMEMBERED_SESSIONS: Final = 4096
#: The most of a first prompt read for a session's title (the rest cannot reach its first words).
TITLE_SCAN: Final = 16 * 1024
#: Runs work in the registry's task group; False when it does not serve.
Background = Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]


class AgentChoiceError(ValueError):
    """The run names an agent that is unknown, or not the one its session belongs to."""


class AgentChoice:
    """The agents a run can name, their adapters (built once) and the agent of each session."""

    def __init__(
        self,
        adapter: AgentAdapter,
        config: BridgeConfig,
        record: SessionRecord | None = None,
        background: Background | None = None,
    ) -> None:
        self.adapter = adapter
        self.config = config
        self._adapters: dict[str, AgentAdapter] = {adapter.name: adapter}
        self._session_agents: OrderedDict[str, str] = OrderedDict()
        #: The sessions opened on agents whose own the bridge cannot read (session_record.py).
        self.record = record if record is not None else SessionRecord(None)
        self._background = background
        self._writing = False

    def adapter_named(self, name: str) -> AgentAdapter:
        """The adapter of agent `name` (built once); raises AgentChoiceError for an unknown one."""
        adapter = self._adapters.get(name)
        if adapter is None:
            settings = {
                "permission_mode": self.config.permission_mode,
                "allowed_tools": self.config.allowed_tools,
                "protocol": self.config.agent_protocols.get(name),
                "command": self.config.agents.get(name),
            }
            try:
                adapter = agents.build_adapter(name, settings)
            except agents.UnknownAgentError as exc:
                raise AgentChoiceError(str(exc)) from None
            self._adapters[name] = adapter
        return adapter

    def command_of(self, adapter: AgentAdapter) -> tuple[str, ...]:
        """How to start an agent: initializationOptions.agents, else the server's command for its
        own adapter, else the agent's executable on PATH."""
        configured = self.config.agents.get(adapter.name)
        if configured:
            return configured
        if adapter is self.adapter:
            return self.config.command
        return agents.default_command(adapter)

    async def prepare_first_prompt(self) -> None:
        """Build every agent's adapter now, while the spare agent boots: a session's first prompt
        asks each whether the session is its own, and building one imports its package. One
        adapter per loop step. (Wire validators are not built ahead: that held memory after a large
        prompt.)"""
        for name in self.agent_names():
            acp = name in agents.ACP_AGENTS or self.config.agent_protocols.get(name) == "acp"
            if acp and name != self.adapter.name:
                continue  # the ACP SDK's schema costs every bridge's start; built when asked for
            try:
                self.adapter_named(name)
            except Exception as exc:  # an agent that cannot be built is the prompt's to report
                log.info("agent %s not built ahead: %s", name, exc)
            await anyio.sleep(0)

    def agent_names(self) -> list[str]:
        """Every agent a run can name: the known ones and any configured."""
        names = [self.adapter.name, *agents.agent_names(), *self.config.agents]
        return list(dict.fromkeys(names))

    def agents_info(self) -> list[AgentInfo]:
        """Each known agent with its command, whether it is found and its version (initialize)."""
        found: list[AgentInfo] = []
        for name in self.agent_names():
            try:
                adapter = self.adapter_named(name)
            except AgentChoiceError:
                continue
            env = {**self.config.env, **self.config.agent_envs.get(name, {})}
            protocol = self.config.agent_protocols.get(name)
            found.append(agents.probe(name, self.command_of(adapter), env, protocol))
        return found

    def history_adapters(self) -> list[AgentAdapter]:
        """The adapters whose stored sessions pi/sessions and pi/session read: every known agent."""
        adapters: list[AgentAdapter] = []
        for name in self.agent_names():
            try:
                adapters.append(self.adapter_named(name))
            except AgentChoiceError:
                continue
        return adapters

    def secret_files(self, environ: Mapping[str, str]) -> list[str]:
        """Every known agent's credential files: a sandboxed command sees none of them."""
        return [path for adapter in self.history_adapters() for path in adapter.secret_files(environ)]

    def config_paths(self, cwd: str, environ: Mapping[str, str]) -> list[str]:
        """Every known agent's config a sandboxed command may not change: the top folder of each
        of its trust roots in `cwd` (all that trust covers, whether or not it is there yet), and
        the folder of its credentials (its config dir, with its user-level extensions; never
        $HOME itself)."""
        home = os.path.realpath(environ.get("HOME") or os.path.expanduser("~"))
        paths: list[str] = []
        for adapter in self.history_adapters():
            for resource in seam.trust_roots(adapter, cwd, environ):
                paths.append(
                    resource if os.path.isabs(resource) else os.path.normpath(resource).split(os.sep)[0]
                )
            folders = {os.path.dirname(path) for path in adapter.secret_files(environ) or ()}
            paths += sorted(folder for folder in folders if os.path.realpath(folder) != home)
        return paths

    def remember(self, session_id: str, agent: str, cwd: str | None = None, prompt: str = "") -> None:
        """Which agent owns a session (a cache: a forgotten one is asked of each agent again).
        With `cwd`, a session of an agent whose sessions the bridge cannot read is recorded too
        (its title from its first `prompt`, secrets masked), written off the loop."""
        self._session_agents[session_id] = agent
        self._session_agents.move_to_end(session_id)
        while len(self._session_agents) > MAX_REMEMBERED_SESSIONS:
            self._session_agents.popitem(last=False)
        adapter = self._adapters.get(agent)
        if cwd is None or not isinstance(adapter, RecordedSessions):
            return
        titled = self.record.get(session_id)
        title = self._title(prompt) if prompt and not (titled and titled.title) else ""
        self.record.note(session_id, agent, cwd, title=title, own_id=adapter.own_session_id(session_id))
        self._write_soon()

    def forget(self, session_id: str) -> bool:
        """The session was deleted: no agent owns it any more, and the record drops it (written
        off the loop); whether the record held it."""
        self._session_agents.pop(session_id, None)
        recorded = self.record.forget(session_id)
        self._write_soon()
        return recorded

    def _write_soon(self) -> None:
        """The record's changes written in the background (here and now when there is none)."""
        if not self._writing:
            self._writing = True
            if self._background is None or not self._background(self._write):
                self._writing = False
                self.record.write(self.record.changes() or [])

    async def _write(self) -> None:
        """The record's changes written off the loop, one write at a time until none is left;
        shielded: a change made as the bridge stops is written still."""
        with anyio.CancelScope(shield=True):
            try:
                while (changes := self.record.changes()) is not None:
                    await anyio.to_thread.run_sync(self.record.write, changes)
            finally:
                self._writing = False

    def _title(self, prompt: str) -> str:
        """A session's title from its first prompt, with every secret the bridge knows masked."""
        head = prompt[:TITLE_SCAN]
        words = Redactor(os.environ, self.config.env).text(head).split()
        if len(head) < len(prompt) and words and not head[-1].isspace():
            words.pop()  # cut where the scan ends: it may be part of a secret
        return title_of(" ".join(words))

    def recorded(self, session_id: str) -> RecordedSession | None:
        """The record's session of this id, when its agent is one the bridge can run now."""
        entry = self.record.get(session_id)
        if entry is None:
            return None
        try:
            adapter = self.adapter_named(entry.agent)
        except AgentChoiceError as exc:
            log.warning("recorded session %s: agent %r is not known now: %s", session_id, entry.agent, exc)
            return None
        if not isinstance(adapter, RecordedSessions):
            return None
        adapter.adopt_session(session_id, entry.own_id or session_id)
        return entry

    def recorded_of(self, cwd: str) -> list[RecordedSession]:
        """The record's sessions of `cwd`, the most recently used first."""
        return self.record.of_cwd(cwd)

    def default_agent(self) -> str:
        """The agent of a run that names none and resumes no known session."""
        return self.config.default_agent or self.adapter.name

    def choose(self, params: RunRequest, cwd: str) -> AgentAdapter:
        """The run's agent: the one it names, else its session's, else the default."""
        return self.named_or_own(params.agent, params.session_id, cwd) or self.adapter_named(
            self.default_agent()
        )

    def named_or_own(self, agent: str | None, session_id: str | None, cwd: str) -> AgentAdapter | None:
        """The agent named, else the session's (None: neither); raises AgentChoiceError for an
        unknown name, or a session that belongs to another agent than the one named."""
        session_agent: str | None = None
        if session_id:
            session_agent = self._session_agents.get(session_id)
            if session_agent is None:
                session_agent = self._owner_of(session_id, cwd)
        if agent and session_agent and agent != session_agent:
            raise AgentChoiceError(
                f"session {session_id!r} belongs to agent {session_agent!r}, not {agent!r}"
            )
        chosen = agent or session_agent
        return self.adapter_named(chosen) if chosen else None

    def _owner_of(self, session_id: str, cwd: str) -> str | None:
        """The agent the bridge's record names (a session pi-acp opened is in pi's files too),
        else the first agent that says the session is its own, if any."""
        recorded = self.recorded(session_id)
        if recorded is not None:
            return recorded.agent
        for name in self.agent_names():
            try:
                candidate = self.adapter_named(name)
            except AgentChoiceError:
                continue
            if candidate.session_exists(session_id, False, cwd, self.config.env):
                return name
        return None
