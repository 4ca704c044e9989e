"""How the LSP front asks its user about a tool call: `pi/requestPermission`, else the standard
`window/showMessageRequest`, for a client that declared it can answer (contract, turn 3).

The client's answer is hostile input like any other: it is read here against the options that
were offered, and anything else (a made-up option id, a malformed result, an error) counts as no
answer, so the call does not run. A request whose wait is cancelled (the run's cancel, the agent's
death, the conversation closed) is withdrawn with `$/cancelRequest`; its late answer finds no
waiter and is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Final

from lsprotocol import types
from pydantic import ValidationError
from pygls.protocol import JsonRPCProtocol

from bridge import contract
from bridge.runs.approvals import CANCELLED, ApprovalAnswer, ApprovalRequest

log = logging.getLogger(__name__)

SHOW_MESSAGE_REQUEST: Final = "window/showMessageRequest"
CANCEL_REQUEST: Final = "$/cancelRequest"


def client_can_answer(capabilities: types.ClientCapabilities | None) -> tuple[bool, bool]:
    """(answers `pi/requestPermission`, answers `window/showMessageRequest` with actions)."""
    if capabilities is None:
        return False, False
    experimental = capabilities.experimental
    ours = experimental.get("piBridge") if isinstance(experimental, dict) else None
    try:
        declared = contract.ClientPiBridgeCapabilities.model_validate(ours if isinstance(ours, dict) else {})
    except ValidationError:
        declared = contract.ClientPiBridgeCapabilities()
    window = capabilities.window
    show = window.show_message if window is not None else None
    return declared.permissions, show is not None and show.message_action_item is not None


class LspApprover:
    """Puts each tool call to an LSP client, by `pi/requestPermission` or as a message request."""

    def __init__(self, protocol: JsonRPCProtocol, *, permission_requests: bool) -> None:
        self._protocol = protocol
        self._permission_requests = permission_requests

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._permission_requests:
            params = request.params().model_dump(mode="json", by_alias=True, exclude_none=True)
            return _read_answer(request, await self._send(contract.REQUEST_PERMISSION, params))
        message = f"{request.tool} wants to run: {request.title}"
        if request.diff is not None:
            message += f" (changes {request.diff.path})"
        shown = types.ShowMessageRequestParams(
            type=types.MessageType.Warning,
            message=message,
            actions=[types.MessageActionItem(title=option.name) for option in request.options],
        )
        chosen = await self._send(SHOW_MESSAGE_REQUEST, shown)
        title = chosen.get("title") if isinstance(chosen, dict) else None
        option = next((option for option in request.options if option.name == title), None)
        return ApprovalAnswer(option_id=option.option_id) if option else CANCELLED

    async def _send(self, method: str, params: Any) -> Any:
        """Send a request and await its raw result; None for an error answer."""
        msg_id = f"pi-bridge-{uuid.uuid4().hex}"
        future = self._protocol.send_request(method, params, msg_id=msg_id)
        # The result is read here, never structured by pygls: a malformed one must not be lost
        # in pygls (its future would never resolve).
        self._protocol._result_types.pop(msg_id, None)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._protocol._request_futures.pop(msg_id, None)
            self._protocol.notify(CANCEL_REQUEST, types.CancelParams(id=msg_id))
            raise
        except Exception as exc:  # the client answered with an error: no answer
            log.info("%s %s answered with an error: %s", method, msg_id, exc)
            return None


def _read_answer(request: ApprovalRequest, result: Any) -> ApprovalAnswer:
    """The client's answer to `pi/requestPermission`, held against the options offered."""
    try:
        answer = contract.RequestPermissionAnswer.model_validate(result)
    except ValidationError as exc:
        log.warning("pi/requestPermission for %s: not an answer (%s)", request.tool_call_id, exc.errors()[:1])
        return CANCELLED
    if answer.outcome == "cancelled" or request.option(answer.option_id) is None:
        return CANCELLED
    return ApprovalAnswer(option_id=answer.option_id, message=answer.message)
