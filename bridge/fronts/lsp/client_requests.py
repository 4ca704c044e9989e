"""Requests the bridge sends to its LSP client (approvals, the agent's dialogs), and what the
client declared it can answer."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from dataclasses import dataclass
from typing import Any

import orjson
from lsprotocol import types
from pydantic import ValidationError
from pygls.protocol import JsonRPCProtocol

from bridge import contract
from bridge.fronts.lsp.writer import frame

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
        self._prefix = f"pi-bridge-{os.urandom(6).hex()}-"
        self._numbers = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    async def send(self, method: str, params: Any) -> Any:
        """Send a request and await its raw result; None for an error answer, or when the
        client can no longer be written to."""
        writer = self._protocol.writer
        if writer is None:
            return None
        msg_id = f"{self._prefix}{next(self._numbers)}"
        plain = params if isinstance(params, dict) else self._protocol._converter.unstructure(params)
        body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": plain})
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = future
        try:
            writer.write(frame(body))
            return await future
        except asyncio.CancelledError:
            self._protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            raise
        finally:
            self._waiting.pop(msg_id, None)

    def take_answer(self, message: dict[str, Any]) -> bool:
        """Hand a response to the request of ours that waits for it (True); anything else is
        not ours (False)."""
        if "method" in message:
            return False
        msg_id = message.get("id")
        future = self._waiting.get(msg_id) if isinstance(msg_id, str) else None
        if future is None:
            return False
        if not future.done():
            if "error" in message:  # the client answered with an error: no answer
                log.info("request %s answered with an error: %s", msg_id, str(message["error"])[:200])
                future.set_result(None)
            else:
                future.set_result(message.get("result"))
        return True

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
