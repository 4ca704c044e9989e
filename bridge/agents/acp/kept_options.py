"""An ACP conversation's client: the own options the editor set, set again on each new process of
it (a retry, a killed agent or an idle close loads the session in a process that starts at its
defaults), and the history the agent replays as it loads the session."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bridge.agents.acp.catalog import SESSION_ENV
from bridge.agents.acp.live import AcpLive, launch_env
from bridge.agents.acp.replay import Replay
from bridge.agents.live_reader import PendingCommand
from bridge.agents.values import AgentOption, LiveError, LiveState
from bridge.contract import PromptImage, SessionHistory

log = logging.getLogger(__name__)


class KeptOptions:
    """Per conversation (the bridge's session id), the agent's own options the editor set, at the
    value the agent last said: one it changed itself (leaving its plan mode) is kept as it left it."""

    def __init__(self) -> None:
        self._by_session: dict[str, dict[str, str]] = {}

    def note(self, session_id: str | None, option_id: str, options: tuple[AgentOption, ...]) -> None:
        """The editor set `option_id`: keep it at its value in `options` (the agent's answer)."""
        current = _current(options, option_id)
        if session_id and current is not None:
            self._by_session.setdefault(session_id, {})[option_id] = current

    def follow(self, session_id: str | None, options: tuple[AgentOption, ...]) -> None:
        """The agent's options changed (its own update): the kept ones follow."""
        kept = self._by_session.get(session_id or "")
        if not kept:
            return
        for option_id in kept:
            current = _current(options, option_id)
            if current is not None:
                kept[option_id] = current

    def to_set(self, session_id: str | None, options: tuple[AgentOption, ...]) -> list[tuple[str, str]]:
        """The kept options that a freshly opened `options` does not have at their kept value."""
        kept = self._by_session.get(session_id or "", {})
        return [(key, value) for key, value in kept.items() if _current(options, key) != value]

    def drop(self, session_id: str | None, option_id: str) -> None:
        """Forget one the agent no longer takes."""
        self._by_session.get(session_id or "", {}).pop(option_id, None)


def _current(options: tuple[AgentOption, ...], option_id: str) -> str | None:
    return next((o.current for o in options if o.option_id == option_id), None)


class AcpConversationLive(AcpLive):
    """An ACP agent's client that keeps what the editor set of its own options (`KeptOptions`)
    and sets it again, once, on a process that loads the conversation, before its next prompt;
    and keeps the history the agent replays as it loads it, for the front that loads it."""

    def __init__(self, *args: Any, kept: KeptOptions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept = kept
        #: Off while the session opens: a loaded session's replay says its defaults, not the editor's.
        self._following = False
        #: The session being loaded (the agent's id) and its replay, until the agent answers.
        self._loading: tuple[str, Replay] | None = None
        self._replayed: SessionHistory | None = None
        #: A loaded session, until its first prompt: a message chunk now is its replay, late.
        self._watch_late = False

    async def prepare(self) -> LiveState:
        """The session opened (AcpLive.prepare); a loaded one gets the kept options again."""
        plan = launch_env(self.child).get(SESSION_ENV, "")
        wanted = plan.removeprefix("load:").partition("|")[0]
        self._loading = (wanted, Replay()) if plan.startswith("load:") else None
        state = await super().prepare()
        if self._loading is not None:
            replay = self._loading[1]
            self._replayed = replay.history(state.session_id or wanted, self._cwd())
            self._loading = None
            turns = len(self._replayed.turns) if self._replayed else 0
            name = self.spec.display_name
            log.info("%s loaded %s: %d updates replayed, %d turns", name, wanted, replay.updates, turns)
            self._watch_late = True
        if plan.startswith("load:"):
            for option_id, value in self._kept.to_set(self._session_id, self._options):
                try:
                    await AcpLive.set_agent_option(self, option_id, value)
                except LiveError as exc:  # the editor hears the agent's own value (its options)
                    log.warning("%s: %s=%s not set again: %s", self.spec.display_name, option_id, value, exc)
                    self._kept.drop(self._session_id, option_id)
        self._following = True
        return state

    async def set_agent_option(self, option_id: str, value: str) -> tuple[AgentOption, ...]:
        """Set through the agent (AcpLive.set_agent_option), and kept for its next process."""
        options = await super().set_agent_option(option_id, value)
        self._kept.note(self._session_id, option_id, options)
        return options

    def _note_state(self, update: Any) -> None:
        before = self._options
        super()._note_state(update)
        if self._following and self._options is not before:
            self._kept.follow(self._session_id, self._options)

    def _session_update(self, line: bytes, params: Any) -> list[bytes]:
        loading = self._loading  # what comes before the agent's answer to session/load is the replay
        if (
            loading is not None
            and self._acp_session is None
            and isinstance(params, dict)
            and (params.get("sessionId") == loading[0])
        ):
            loading[1].feed(params.get("update"))
        elif self._watch_late and self._prompt is None and _is_history(params):
            self._watch_late = False  # said once: a replay that came late is not in the history read
            log.warning("%s replayed part of its session after answering its load", self.spec.display_name)
        return super()._session_update(line, params)

    def take_replayed(self) -> SessionHistory | None:
        """What the agent replayed as this process loaded the session, handed out once."""
        replayed, self._replayed = self._replayed, None
        return replayed

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> PendingCommand:
        """AcpLive.send_prompt_now; a replay not handed out by now is of no front's load."""
        self._replayed = None
        self._watch_late = False
        return super().send_prompt_now(text, images=images)


def _is_history(params: Any) -> bool:
    """A user's or the agent's message chunk: what a session/load replays."""
    update = params.get("update") if isinstance(params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    return kind in ("user_message_chunk", "agent_message_chunk")
