"""The conversation toolbox outside a run: its `/` commands, its title, its deletion."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from bridge.agents.seam import AgentAdapter, OwnOptions
from bridge.agents.values import AgentCommand, AgentOption, LiveError
from bridge.checkpoints.recorder import CheckpointError, CheckpointRecord
from bridge.checkpoints.shadow_git import ShadowGitError
from bridge.contract import (
    CheckpointFileResult,
    CheckpointInfo,
    CheckpointsResult,
    CommandInfo,
    CommandsResult,
    DeleteSessionResult,
    ModelInfo,
    ModelsResult,
    RenameSessionResult,
    RewindParams,
    RewindResult,
    SessionHistory,
)
from bridge.engines.live.live_agent import LiveAgent
from bridge.policy.redact import Redactor
from bridge.runs import history
from bridge.runs.commands import command_list
from bridge.runs.registry import NoLiveMode, OpenFailure, RunRegistry

T = TypeVar("T")


class ConversationAdminError(Exception):
    """A toolbox request that cannot be done: no such session, or its agent refused or failed."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class ConversationAdmin:
    """The toolbox requests of one front, over its registry."""

    def __init__(self, registry: RunRegistry) -> None:
        self.registry = registry

    async def commands(
        self, session_id: str | None, cwd: str, agent_name: str | None = None
    ) -> CommandsResult:
        """The bridge's commands and the agent's, for the conversation (a new one in `cwd` when
        none is named: its id comes back, for the client's next prompt) of agent `agent_name`
        (default the server's own). Raises AgentChoiceError for an unknown agent or another's session."""
        if not self._has_live(self._adapter(agent_name, session_id, cwd)):
            return CommandsResult(commands=[])
        agent = await self._live(session_id, cwd, agent_name)
        listed = await self._ask("list its commands", agent.client.commands)
        return CommandsResult(commands=self.listing(listed), session_id=agent.session_id)

    async def models(self, session_id: str | None, cwd: str, agent_name: str | None = None) -> ModelsResult:
        """The models the conversation's agent can run, from its own list, and the one it runs now
        (a new conversation in `cwd` when none is named: its id comes back, as for commands)."""
        if not self._has_live(self._adapter(agent_name, session_id, cwd)):
            return ModelsResult(models=[])
        agent = await self._live(session_id, cwd, agent_name)
        listed = await self._ask("list its models", agent.client.available_models)
        provider, model = agent.provider, agent.model
        models = [
            ModelInfo(
                provider=m.provider,
                id=m.model_id,
                name=m.name if m.name != m.model_id else None,
                current=m.model_id == model and (provider is None or m.provider == provider),
            )
            for m in listed
        ]
        # Only a listed model is current: an agent with no usable model names a placeholder
        # (pi without a key says "unknown"), which no run could name.
        current = next((m for m in models if m.current), None)
        return ModelsResult(models=models, current=current, session_id=agent.session_id)

    async def set_agent_option(self, session_id: str, option_id: str, value: str) -> tuple[AgentOption, ...]:
        """Set one of the agent's own options (an ACP agent's mode or config option) through the
        conversation's agent (the server's own, or the one picked for it); its options as the
        agent answered."""
        chosen = self.registry.agents.named_or_own(None, session_id, os.getcwd())
        agent = await self._live(session_id, None, chosen.name if chosen is not None else None)
        client = agent.client
        if not isinstance(client, OwnOptions):
            raise ConversationAdminError(f"the agent has no option {option_id!r} of its own")
        return await self._ask(f"set its {option_id!r}", lambda: client.set_agent_option(option_id, value))

    async def agent_options(self, session_id: str) -> tuple[AgentOption, ...]:
        """The agent's own options as they are now, whichever agent serves the conversation (none
        when it is not live)."""
        for conversations in self.registry.attempts.every_conversations():
            agent = conversations.slots.live_agent(session_id)
            if agent is not None and agent.alive and isinstance(agent.client, OwnOptions):
                return await agent.client.agent_options()
        return ()

    @staticmethod
    def listing(agent_commands: list[AgentCommand]) -> list[CommandInfo]:
        """The list a client shows: the bridge's commands, then the agent's."""
        return command_list(agent_commands)

    async def rename(self, session_id: str, title: str) -> RenameSessionResult:
        """Give the conversation a title, stored by its agent (a live run streams session.renamed)."""
        title = " ".join(title.split())
        if not title:
            raise ConversationAdminError("title: a title needs a visible character")
        agent = await self._live(session_id, None)
        await self._ask("rename the session", lambda: agent.client.rename(title))
        return RenameSessionResult(session_id=session_id, title=title)

    async def delete(self, session_id: str) -> DeleteSessionResult:
        """Stop the conversation's agent (its runs cancelled first), then delete its stored session."""
        registry = self.registry
        await registry.close_session(session_id)
        adapter, env = registry.adapter, registry.config.env
        try:
            deleted = await anyio.to_thread.run_sync(adapter.delete_session, session_id, env)
        except OSError as exc:
            raise ConversationAdminError(f"the session could not be deleted: {exc.strerror}") from None
        await registry.checkpoints.forget_session(session_id)
        recorded = registry.agents.forget(session_id)  # an ACP agent's session, in the bridge's record
        return DeleteSessionResult(deleted=deleted or recorded)

    async def holds_a_login(self) -> bool:
        """Whether the agent keeps a login it stored itself (a credential file with an entry)."""
        registry = self.registry
        files = registry.adapter.secret_files({**os.environ, **registry.config.env})
        return await anyio.to_thread.run_sync(lambda: any(_has_an_entry(path) for path in files))

    # ------------------------------------------------------------------ checkpoints

    async def checkpoints(self, session_id: str) -> CheckpointsResult:
        """The conversation's checkpoints, oldest first."""
        store = self.registry.checkpoints
        available, reason = store.status()
        listed = await store.of_session(session_id) if available else []
        return CheckpointsResult(
            available=available,
            reason=reason,
            checkpoints=[
                CheckpointInfo(
                    checkpoint_id=r.checkpoint_id,
                    prompt=r.prompt,
                    created_at=r.created_at,
                    run_id=r.run_id,
                    files=r.files,
                    notes=r.notes,
                )
                for r in listed
            ],
        )

    async def rewind(self, params: RewindParams) -> RewindResult:
        """Files, the conversation or both back to before a checkpoint's prompt (see checkpoints.py)."""
        session_id, store = params.session_id, self.registry.checkpoints
        if self.registry.has_live_run(session_id):
            raise ConversationAdminError("a run of this conversation is live: cancel it or let it end first")
        listed, index = await self._checkpoint(session_id, params.checkpoint_id)
        restored: list[str] = []
        conflicts: list[str] = []
        if params.restore in ("files", "both"):
            try:
                plan = await store.rewind_files(
                    session_id, listed, index, dry_run=params.dry_run, force=params.force
                )
            except ShadowGitError as exc:
                raise ConversationAdminError(f"the files could not be rewound: {exc}") from None
            restored, conflicts = plan.restored, plan.conflicts
        if params.restore in ("conversation", "both") and not params.dry_run:
            record = listed[index]
            agent = await self._live(session_id, record.cwd)
            state = await self._ask(
                "go back in the conversation", lambda: agent.client.fork_before(record.prompt, record.ordinal)
            )
            self.registry.conversations.slots.rebind(agent, state)
            session_id = agent.session_id or session_id
            await store.copy_to(session_id, [r for r in listed[:index] if r.kind == "turn"])
        return RewindResult(
            restored=restored, conflicts=conflicts, session_id=session_id, dry_run=params.dry_run
        )

    async def fork(self, session_id: str, cwd: str) -> str:
        """The conversation as it is now, continued on a new session (ACP session/fork); its id.
        The old session stays stored and readable."""
        if self.registry.has_live_run(session_id):
            raise ConversationAdminError("a run of this conversation is live: cancel it or let it end first")
        agent = await self._live(session_id, cwd)
        state = await self._ask("fork the session", agent.client.clone)
        self.registry.conversations.slots.rebind(agent, state)
        if agent.session_id is None:
            raise ConversationAdminError("the agent did not name the forked session")
        store = self.registry.checkpoints
        await store.copy_to(agent.session_id, await store.of_session(session_id))
        return agent.session_id

    async def checkpoint_file(self, session_id: str, checkpoint_id: str, path: str) -> CheckpointFileResult:
        """One file as it was at a checkpoint: the old side of a preview."""
        listed, index = await self._checkpoint(session_id, checkpoint_id)
        try:
            data = await self.registry.checkpoints.file_at(listed[index], path)
        except ShadowGitError as exc:
            raise ConversationAdminError(f"the file could not be read: {exc}") from None
        if data is None:
            return CheckpointFileResult(path=path, content=None)
        try:
            return CheckpointFileResult(path=path, content=data.decode("utf-8"))
        except UnicodeDecodeError:
            return CheckpointFileResult(path=path, content=None, binary=True)

    async def _checkpoint(self, session_id: str, checkpoint_id: str) -> tuple[list[CheckpointRecord], int]:
        store = self.registry.checkpoints
        available, reason = store.status()
        if not available:
            raise ConversationAdminError(f"checkpoints are off: {reason}")
        try:
            return await store.find(session_id, checkpoint_id)
        except CheckpointError as exc:
            raise ConversationAdminError(str(exc), not_found=exc.not_found) from None

    async def recorded_history(self, session_id: str) -> SessionHistory | None:
        """A recorded session's turns (an ACP agent's, kept where the bridge cannot read them), as
        its agent replays them while it loads the session; None: the bridge recorded no such
        session. One live now is closed first: its agent replays only as it loads it."""
        registry = self.registry
        recorded = registry.agents.recorded(session_id)
        if recorded is None:
            return None
        if registry.has_live_run(session_id):
            raise ConversationAdminError(f"session {session_id!r} has a running prompt: read it once it ends")
        await registry.close_session(session_id)
        adapter = registry.agents.adapter_named(recorded.agent)
        try:
            opened = await registry.open_conversation(recorded.cwd, session_id, agent=adapter)
        except OpenFailure as exc:
            raise ConversationAdminError(f"the agent could not start: {exc.error.message}") from None
        except NoLiveMode as exc:
            raise ConversationAdminError(f"the agent has no live mode: {exc}") from None
        replayed = opened.replayed or SessionHistory(
            session_id=session_id, cwd=recorded.cwd, title=recorded.title, turns=[]
        )
        return replayed.model_copy(
            update={"agent": recorded.agent, "title": recorded.title or replayed.title}
        )

    def _adapter(self, agent_name: str | None, session_id: str | None, cwd: str | None) -> AgentAdapter:
        """The agent named (checked against the session's own), else the session's, else the
        server's own."""
        if agent_name is None and session_id is None:
            return self.registry.adapter
        chosen = self.registry.agents.named_or_own(agent_name, session_id, cwd or os.getcwd())
        return chosen or self.registry.adapter

    def _has_live(self, adapter: AgentAdapter) -> bool:
        """Whether `adapter`'s conversations have a live agent to ask (the seam's live mode)."""
        registry = self.registry
        if adapter.live_mode() is None:
            return False
        return adapter is registry.adapter or registry.attempts.is_live(adapter)

    async def _live(
        self, session_id: str | None, cwd: str | None, agent_name: str | None = None
    ) -> LiveAgent:
        """The conversation's live agent (of agent `agent_name`, default the server's own), opened
        (resumed, or new in `cwd`) when it has none."""
        registry = self.registry
        adapter = self._adapter(agent_name, session_id, cwd)
        conversations = registry.attempts.live_conversations(adapter)
        agent = conversations.slots.live_agent(session_id) if session_id else None
        if agent is not None and agent.alive:
            return agent
        if session_id is not None:
            cwd = await self._recorded_cwd(adapter, session_id) or cwd
        try:
            opened = await registry.open_conversation(cwd or os.getcwd(), session_id, agent=adapter)
        except OpenFailure as exc:
            raise ConversationAdminError(f"the agent could not start: {exc.error.message}") from None
        except NoLiveMode as exc:
            raise ConversationAdminError(f"the agent has no live mode: {exc}") from None
        agent = registry.attempts.live_conversations(adapter).slots.live_agent(opened.session_id)
        if agent is None:
            raise ConversationAdminError("the conversation's agent was gone as soon as it was opened")
        return agent

    async def _recorded_cwd(self, adapter: AgentAdapter, session_id: str) -> str | None:
        """The folder of `adapter`'s recorded session: from the bridge's record (an ACP agent keeps
        its sessions where the bridge cannot read them), else from the agent's session file;
        raises ConversationAdminError when there is neither."""
        registry = self.registry
        recorded = registry.agents.recorded(session_id)
        if recorded is not None and recorded.agent == adapter.name:
            return recorded.cwd
        stored = await history.read_session([adapter], session_id, registry.config.env)
        if not isinstance(stored, SessionHistory):
            raise ConversationAdminError(f"no session {session_id!r} was found", not_found=True)
        return stored.cwd

    async def _ask(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """The agent's answer; its refusal or silence is the client's error (secrets masked)."""
        try:
            return await call()
        except LiveError as exc:
            reason = Redactor(os.environ, self.registry.config.env).text(str(exc))
            raise ConversationAdminError(f"the agent could not {what}: {reason}") from None


def _has_an_entry(path: str) -> bool:
    """A credential file holding something: a JSON object with a key, or any other non-empty text.
    Only its shape is read: no value leaves this function."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except OSError:
        return False
    try:
        parsed = json.loads(data)
    except ValueError:
        return bool(data.strip())
    return bool(parsed) if isinstance(parsed, dict | list) else parsed is not None
