"""Requests the ACP front sends its client on behalf of a session (approvals, the agent's
dialogs), what the client declared it answers, and their settling."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

import anyio
from acp import RequestError, schema
from acp.connection import Connection

log = logging.getLogger(__name__)

CANCEL_REQUEST: Final = "$/cancel_request"


@dataclass(frozen=True)
class ClientAnswers:
    """What the client said in `initialize` that it answers, beyond session/request_permission."""

    elicitation_form: bool = False  # elicitation/create in form mode
    read_text_file: bool = False  # fs/read_text_file
    write_text_file: bool = False  # fs/write_text_file
    terminal: bool = False  # terminal/create, output, wait_for_exit, kill, release


def client_answers(capabilities: Any) -> ClientAnswers:
    """The requests a client with `capabilities` (initialize's raw `clientCapabilities`) answers;
    anything malformed: none beyond permissions."""
    if isinstance(capabilities, schema.ClientCapabilities):
        declared = capabilities
    else:
        try:
            declared = schema.ClientCapabilities.model_validate(capabilities or {})
        except ValueError:
            return ClientAnswers()
    elicitation, fs = declared.elicitation, declared.fs
    return ClientAnswers(
        elicitation_form=elicitation is not None and elicitation.form is not None,
        read_text_file=fs is not None and fs.read_text_file is True,
        write_text_file=fs is not None and fs.write_text_file is True,
        terminal=declared.terminal is True,
    )


@dataclass(frozen=True)
class Reply:
    """A client's answer: its raw result, or `error` (an error answer, a closed connection, a
    request settled or withdrawn)."""

    result: Any = None
    error: str | None = None


class ClientRequests:
    """Sends requests to the client, a session's at a time, and settles them on session/cancel."""

    def __init__(self) -> None:
        self.conn: Connection | None = None
        self.answers = ClientAnswers()
        self._pending: dict[str, set[anyio.CancelScope]] = {}

    async def send(self, session_id: str, method: str, params: dict[str, Any]) -> Any:
        """The client's raw result; None for an error answer, a closed connection, or a request
        settled by `settle`. Cancelled while it waits, the request is withdrawn."""
        return (await self.call(session_id, method, params)).result

    async def call(self, session_id: str, method: str, params: dict[str, Any]) -> Reply:
        """The client's answer, an error answer told apart from a null result (see `send`)."""
        conn = self.conn
        if conn is None:
            return Reply(error="the client is gone")
        scope = anyio.CancelScope()
        self._pending.setdefault(session_id, set()).add(scope)
        # The id send_request takes: read with no await in between, as it reads it.
        request_id = conn._next_request_id
        try:
            with scope:
                try:
                    return Reply(await conn.send_request(method, params))
                except anyio.get_cancelled_exc_class():
                    await _withdraw(conn, request_id)
                    raise
            return Reply(error="the request was cancelled")  # settled
        except (RequestError, ConnectionError) as exc:
            log.info("%s for session %s: no answer (%s)", method, session_id, exc)
            return Reply(error=str(exc) or type(exc).__name__)
        finally:
            scopes = self._pending.get(session_id)
            if scopes is not None:
                scopes.discard(scope)
                if not scopes:
                    del self._pending[session_id]

    def settle(self, session_id: str) -> int:
        """End every pending request of `session_id` unanswered; how many there were."""
        scopes = self._pending.pop(session_id, set())
        for scope in scopes:
            scope.cancel()
        return len(scopes)

    def pending(self, session_id: str) -> int:
        """How many requests of `session_id` wait for the client now."""
        return len(self._pending.get(session_id, ()))


async def _withdraw(conn: Connection, request_id: int) -> None:
    """Tell the client the request is void (shielded: the waiter is being cancelled)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
        try:
            await conn.send_notification(CANCEL_REQUEST, {"requestId": request_id})
        except (ConnectionError, OSError) as exc:
            log.info("%s %s not sent: %s", CANCEL_REQUEST, request_id, exc)
