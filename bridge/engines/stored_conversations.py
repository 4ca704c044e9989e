"""Conversations of an agent with no live mode: each prompt is one process that resumes the
agent's own stored session, so a conversation is nothing but a session id (minted here if need be)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping

from bridge.agents.seam import AgentAdapter
from bridge.agents.values import OpenedConversation, RunOptions


class StoredConversations:
    """The session ids the bridge named for agents without a live mode."""

    def __init__(self) -> None:
        self._named: set[str] = set()

    def open(self, session_id: str | None, provider: str | None, model: str | None) -> OpenedConversation:
        """A conversation ahead of its first prompt: `session_id` resumed, else a new id.

        There is no live agent to ask for its models, so the choice is the configured model.
        """
        if session_id is None:
            session_id = str(uuid.uuid4())
            self._named.add(session_id)
        return OpenedConversation(
            session_id=session_id,
            provider=provider,
            model=model,
            thinking=None,
            models=(),
            thinking_levels=(),
        )

    def options_for(self, adapter: AgentAdapter, options: RunOptions, env: Mapping[str, str]) -> RunOptions:
        """The options of the next attempt: whether it starts a named session or resumes it."""
        if options.session_id is None or options.session_id not in self._named:
            return options
        stored = adapter.session_exists(options.session_id, False, options.cwd, env)
        return dataclasses.replace(options, resumed=stored, new_session=not stored)
