"""Requests the bridge sends to its LSP client (approvals, the agent's dialogs), and what the
client declared it can answer.

A request's result is read raw, never structured by pygls, since a malformed one must not be lost
inside pygls (its future would never resolve). A request whose wait is cancelled is withdrawn
with `$/cancelRequest`; its late answer then finds no waiter and is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pydantic import ValidationError
from pygls.protocol import JsonRPCProtocol

from bridge import contract

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClientAnswers:
    """What the client said in `initialize` that it answers."""

    permissions: bool = False  # pi/requestPermission
    questions: bool = False  # pi/ask
    message_requests: bool = False  # window/showMessageRequest with actions


def client_answers(capabilities: types.ClientCapabilities | None) -> ClientAnswers:
    """The requests a client with `capabilities` answers (anything malformed: none of ours)."""
    if capabilities is None:
        return ClientAnswers()
    experimental = capabilities.experimental
    ours = experimental.get("piBridge") if isinstance(experimental, dict) else None
    try:
        declared = contract.ClientPiBridgeCapabilities.model_validate(ours if isinstance(ours, dict) else {})
    except ValidationError:
        declared = contract.ClientPiBridgeCapabilities()
    window = capabilities.window
    show = window.show_message if window is not None else None
    return ClientAnswers(
        permissions=declared.permissions,
        questions=declared.questions,
        message_requests=show is not None and show.message_action_item is not None,
    )


class ClientRequests:
    """Sends requests to the client and awaits their raw results."""

    def __init__(self, protocol: JsonRPCProtocol) -> None:
        self._protocol = protocol

    async def send(self, method: str, params: Any) -> Any:
        """Send a request and await its raw result; None for an error answer."""
        msg_id = f"pi-bridge-{uuid.uuid4().hex}"
        future = self._protocol.send_request(method, params, msg_id=msg_id)
        self._protocol._result_types.pop(msg_id, None)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._protocol._request_futures.pop(msg_id, None)
            self._protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            raise
        except Exception as exc:  # the client answered with an error: no answer
            log.info("%s %s answered with an error: %s", method, msg_id, exc)
            return None

    def notify(self, method: str, params: Any) -> None:
        """Send a notification."""
        self._protocol.notify(method, params)

    async def choose(self, kind: types.MessageType, message: str, actions: list[str]) -> str | None:
        """Ask with `window/showMessageRequest`; the title of the action chosen, None for none."""
        shown = types.ShowMessageRequestParams(
            type=kind, message=message, actions=[types.MessageActionItem(title=title) for title in actions]
        )
        chosen = await self.send(types.WINDOW_SHOW_MESSAGE_REQUEST, shown)
        title = chosen.get("title") if isinstance(chosen, dict) else None
        return title if isinstance(title, str) and title in actions else None
