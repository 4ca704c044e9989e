"""How the LSP front asks its user about a tool call: `pi/requestPermission`, else the standard
`window/showMessageRequest`, for a client that declared it can answer (contract, turn 3).

The client's answer is hostile input like any other: it is read here against the options that
were offered, and anything else (a made-up option id, a malformed result, an error) counts as no
answer, so the call does not run. A request whose wait is cancelled (the run's cancel, the agent's
death, the conversation closed) is withdrawn (client_requests.py).

Both carry the whole call: `pi/requestPermission` its `command` and `path` beside the title, the
message request's text the whole command (or path), never the title alone, which may be cut.
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pydantic import ValidationError

from bridge import contract
from bridge.fronts.lsp.client_requests import ClientRequests
from bridge.policy.approvals import CANCELLED, ApprovalAnswer, ApprovalRequest

log = logging.getLogger(__name__)


class LspApprover:
    """Puts each tool call to an LSP client, by `pi/requestPermission` or as a message request."""

    def __init__(self, client: ClientRequests, *, permission_requests: bool) -> None:
        self._client = client
        self._permission_requests = permission_requests

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._permission_requests:
            params = request.params().model_dump(mode="json", by_alias=True, exclude_none=True)
            return _read_answer(request, await self._client.send(contract.REQUEST_PERMISSION, params))
        message = request.message or fallback_message(request)
        names = [option.name for option in request.options]
        title = await self._client.choose(types.MessageType.Warning, message, names)
        option = next((option for option in request.options if option.name == title), None)
        return ApprovalAnswer(option_id=option.option_id) if option else CANCELLED


def fallback_message(request: ApprovalRequest) -> str:
    """The `window/showMessageRequest` text of a tool call: the whole command (or path), never
    only the title, which may be cut: the user answers for what they read."""
    message = f"{request.tool} wants to run:\n{request.whole()}"
    if request.diff is not None and request.diff.path != request.path:
        message += f"\n(changes {request.diff.path})"
    return message


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
