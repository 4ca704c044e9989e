"""How the ACP front puts the agent's own dialogs to its user (contract, turn 3, "ACP front"):
select and confirm as `session/request_permission` (an option per choice; Yes and No), input
and editor as `elicitation/create` (a one-field form) for a client that declared elicitation
forms in `initialize`, else not at all (questions.py then answers them `cancelled` at once).

A `notify` needs nothing here: it is a `notice` in the run's stream already, which the prompt's
updates show (mapping.py). What the client answers is read against what was asked, and
anything else is no answer.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Final

from acp import schema
from pydantic import ValidationError

from bridge.fronts.acp.approver import REQUEST_PERMISSION
from bridge.fronts.acp.client_requests import ClientRequests
from bridge.policy.questions import DIALOG_CANCELLED, Dialog, DialogKind, DialogReply, Question

log = logging.getLogger(__name__)

ELICITATION_CREATE: Final = "elicitation/create"
YES: Final = "yes"
NO: Final = "no"
FIELD: Final = "value"
_CHOICE: Final = "choice-"
_PERMISSION_KINDS: Final = frozenset({"select", "confirm"})
_FORM_KINDS: Final = frozenset({"input", "editor"})


class AcpQuestioner:
    """Asks the ACP client the agent's dialogs, as far as the client can answer them."""

    def __init__(self, client: ClientRequests) -> None:
        self._client = client

    def can_ask(self, kind: DialogKind) -> bool:
        return kind in _PERMISSION_KINDS or (kind in _FORM_KINDS and self._client.answers.elicitation_form)

    async def __call__(self, question: Question) -> DialogReply:
        session_id, dialog = question.session_id, question.dialog
        if session_id is None:
            return DIALOG_CANCELLED
        if dialog.kind in _FORM_KINDS:
            params = elicitation_request(session_id, dialog)
            return read_form_answer(await self._client.send(session_id, ELICITATION_CREATE, params))
        request = dialog_request(session_id, dialog)
        wire = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        return read_choice(dialog, await self._client.send(session_id, REQUEST_PERMISSION, wire))

    def notify(self, run_id: str, dialog: Dialog) -> None:
        """Nothing to send: the run's stream carries the notify as a `notice` (mapping.py)."""


def dialog_request(session_id: str, dialog: Dialog) -> schema.RequestPermissionRequest:
    """A select or confirm as `session/request_permission`: the dialog is the "tool call" (an id
    of its own, kind `other`, its message as content), its answers the options."""
    if dialog.kind == "confirm":
        options = [
            schema.PermissionOption(option_id=YES, name="Yes", kind="allow_once"),
            schema.PermissionOption(option_id=NO, name="No", kind="reject_once"),
        ]
    else:
        options = [
            schema.PermissionOption(option_id=f"{_CHOICE}{index}", name=choice, kind="allow_once")
            for index, choice in enumerate(dialog.options)
        ]
    content = None
    if dialog.message:
        text = schema.TextContentBlock(type="text", text=dialog.message)
        content = [schema.ContentToolCallContent(type="content", content=text)]
    call = schema.ToolCallUpdate(
        tool_call_id=f"dialog-{uuid.uuid4().hex[:12]}",
        title=dialog.title,
        kind="other",
        status="pending",
        content=content,
        field_meta={"piBridge": {"dialog": dialog.kind}},
    )
    return schema.RequestPermissionRequest(session_id=session_id, tool_call=call, options=options)


def read_choice(dialog: Dialog, result: Any) -> DialogReply:
    """The answer to a select or confirm asked by `dialog_request` (anything else: cancelled)."""
    try:
        outcome = schema.RequestPermissionResponse.model_validate(result).outcome
    except ValidationError as exc:
        log.warning(
            "%s for a %s dialog: not an answer (%s)", REQUEST_PERMISSION, dialog.kind, exc.errors()[:1]
        )
        return DIALOG_CANCELLED
    if not isinstance(outcome, schema.AllowedOutcome):
        return DIALOG_CANCELLED
    chosen = outcome.option_id
    if dialog.kind == "confirm":
        return DialogReply(confirmed=chosen == YES) if chosen in (YES, NO) else DIALOG_CANCELLED
    index = chosen.removeprefix(_CHOICE)
    if chosen.startswith(_CHOICE) and index.isdigit() and int(index) < len(dialog.options):
        return DialogReply(value=dialog.options[int(index)])
    return DIALOG_CANCELLED


def elicitation_request(session_id: str, dialog: Dialog) -> dict[str, Any]:
    """An input or editor as a form `elicitation/create` of one text field (the prefill as its
    default, the placeholder as its description)."""
    field: dict[str, Any] = {"type": "string", "title": dialog.title}
    if dialog.prefill is not None:
        field["default"] = dialog.prefill
    if dialog.placeholder:
        field["description"] = dialog.placeholder
    request = schema.CreateFormSessionElicitationRequest(
        session_id=session_id,
        mode="form",
        message=dialog.message or dialog.title,
        requested_schema=schema.ElicitationSchema.model_validate(
            {"type": "object", "properties": {FIELD: field}, "required": [FIELD]}
        ),
        field_meta={"piBridge": {"dialog": dialog.kind}},
    )
    return request.model_dump(mode="json", by_alias=True, exclude_none=True)


def read_form_answer(result: Any) -> DialogReply:
    """The text an accepted form gave (questions.py holds it against the dialog); else cancelled."""
    if not isinstance(result, dict) or result.get("action") != "accept":
        return DIALOG_CANCELLED
    try:
        accepted = schema.AcceptElicitationResponse.model_validate(result)
    except ValidationError:
        return DIALOG_CANCELLED
    value = (accepted.content or {}).get(FIELD)
    return DialogReply(value=value) if isinstance(value, str) else DIALOG_CANCELLED
