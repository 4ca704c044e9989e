"""The fast path: a session/prompt or session/cancel served as its frame is read, before the SDK's
dispatch (a task later, then its router), in the order the frames came.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from acp import RequestError, schema
from pydantic import ValidationError

from bridge.fronts.acp.outbox import Outbox
from bridge.fronts.acp.session.open_sessions import AcpSession, Sessions
from bridge.fronts.acp.session.prompts import Prompts, answer_frame
from bridge.runs.registry import Run

log = logging.getLogger(__name__)


class FastPath:
    """Frames served as read (`direct`), and the count of those left to the SDK."""

    def __init__(
        self,
        sessions: Sessions,
        prompts: Prompts,
        outbox: Outbox,
        later: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.sessions = sessions
        self.prompts = prompts
        self.outbox = outbox
        self._later = later
        # Frames `direct` left to the SDK whose handler has not started yet.
        self._sdk_pending = 0

    def direct(self, message: dict[str, Any]) -> bool:
        """A frame as it is read, before the SDK's dispatch; True when it was served here.

        - session/cancel (a notification) stops the session's prompts at once; served whole
          here when every earlier frame is in its handler already, else the SDK's dispatch
          sees to prompts that were still waiting for it.
        - session/prompt starts its run here, validated with the SDK's own schema and answered
          as the SDK's connection would (`answer_frame`), only while every earlier frame is in
          its handler already; anything invalid is left to the SDK path.
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
        if not isinstance(session_id, str) or session_id not in self.sessions:
            return False
        self.prompts.stop(session_id)
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
            self.prompts.start(
                session, request.prompt, on_done=lambda run: self._prompt_done(msg_id, session, run)
            )
        except RequestError:
            return False
        return True

    def _prompt_done(self, msg_id: Any, session: AcpSession, run: Run) -> None:
        """A prompt served as read has ended: its answer goes out now, right behind its updates
        when none waits in line (no task to wake first), else once they are sent."""
        transport = self.outbox.transport
        if transport is not None and self.outbox.idle:
            self.prompts.forget(session, run)
            if transport.send_now(answer_frame(msg_id, run)):
                return
        self._later(self._answer_later(msg_id, session, run))

    async def _answer_later(self, msg_id: Any, session: AcpSession, run: Run) -> None:
        await self.outbox.flush()
        self.prompts.forget(session, run)
        transport = self.outbox.transport
        if transport is not None:
            try:
                await transport.send(answer_frame(msg_id, run))
            except (ConnectionError, OSError) as exc:
                log.info("prompt answer not sent: %s", exc)
