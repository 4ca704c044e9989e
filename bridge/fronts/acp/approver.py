"""How the ACP front asks its user about a tool call: `session/request_permission` with the gate's
options, the call and an edit's diff; the answer is hostile input, and anything but an offered
option is no answer (the call does not run)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Final

from acp import schema
from pydantic import ValidationError

from bridge.fronts.acp.client_requests import ClientRequests
from bridge.fronts.acp.updates import tool_kind
from bridge.policy.approvals import CANCELLED, ApprovalAnswer, ApprovalRequest

log = logging.getLogger(__name__)

REQUEST_PERMISSION: Final = "session/request_permission"


class AcpApprover:
    """Puts each tool call to the ACP client as `session/request_permission`."""

    def __init__(self, client: ClientRequests, cwd_of: Callable[[str], str | None]) -> None:
        self._client = client
        self._cwd_of = cwd_of

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        session_id = request.session_id
        if session_id is None:
            return CANCELLED
        params = permission_request(request, session_id, self._cwd_of(session_id))
        wire = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        return read_answer(request, await self._client.send(session_id, REQUEST_PERMISSION, wire))


def permission_request(
    request: ApprovalRequest, session_id: str, cwd: str | None
) -> schema.RequestPermissionRequest:
    """The `session/request_permission` params of one tool call: the options as offered (an
    "always" option's rule in `_meta.piBridge.rule`), and the call with its diff."""
    options = [
        schema.PermissionOption(
            option_id=option.option_id,
            name=option.name,
            kind=option.kind,
            field_meta=(
                {"piBridge": {"rule": option.rule.model_dump(mode="json", by_alias=True, exclude_none=True)}}
                if option.rule is not None
                else None
            ),
        )
        for option in request.options
    ]
    return schema.RequestPermissionRequest(
        session_id=session_id, tool_call=_tool_call(request, cwd), options=options
    )


def _tool_call(request: ApprovalRequest, cwd: str | None) -> schema.ToolCallUpdate:
    """The call put to the user: its title (one line, maybe cut), the whole command as a text
    content block (never cut), the raw input, and for a file change its diff."""
    content: list[Any] = []
    locations = None
    if request.command is not None:
        text = schema.TextContentBlock(type="text", text=request.command)
        content.append(schema.ContentToolCallContent(type="content", content=text))
    diff = request.diff
    if diff is not None:
        path = os.path.join(cwd, diff.path) if cwd else diff.path
        locations = [schema.ToolCallLocation(path=path)]
        if diff.new_text is not None:
            content.append(
                schema.FileEditToolCallContent(
                    type="diff", path=path, old_text=diff.old_text, new_text=diff.new_text
                )
            )
    return schema.ToolCallUpdate(
        tool_call_id=request.tool_call_id,
        title=request.title,
        kind=_kind_of(request),
        status="pending",
        raw_input=dict(request.input),
        content=content or None,
        locations=locations,
    )


def _kind_of(request: ApprovalRequest) -> schema.ToolKind:
    """ACP's kind of the call: a tool ACP names more closely (pi's grep is a search), else the
    kind the agent's adapter gave it (Claude Code's Write is an edit, its Bash an execute)."""
    kind = tool_kind(request.tool)
    return request.kind if kind == "other" else kind


def read_answer(request: ApprovalRequest, result: Any) -> ApprovalAnswer:
    """The client's answer, held against the options offered (anything else: no answer)."""
    try:
        answer = schema.RequestPermissionResponse.model_validate(result)
    except ValidationError as exc:
        log.warning(
            "%s for %s: not an answer (%s)", REQUEST_PERMISSION, request.tool_call_id, exc.errors()[:1]
        )
        return CANCELLED
    outcome = answer.outcome
    if not isinstance(outcome, schema.AllowedOutcome) or request.option(outcome.option_id) is None:
        return CANCELLED
    return ApprovalAnswer(option_id=outcome.option_id)
