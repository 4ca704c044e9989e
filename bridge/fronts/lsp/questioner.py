"""How the LSP front puts the agent's own dialogs to its user: `pi/ask` for a client that declared
`questions`, else `window/showMessageRequest` for select and confirm; a `notify` becomes
`window/showMessage` (contract, turn 3).

What the client answers is read here against the contract, and anything else is no answer.
"""

from __future__ import annotations

import logging
from typing import Final

from lsprotocol import types
from pydantic import ValidationError

from bridge import contract
from bridge.fronts.lsp.client_requests import ClientAnswers, ClientRequests
from bridge.policy.questions import DIALOG_CANCELLED, Dialog, DialogKind, DialogReply, Question

log = logging.getLogger(__name__)

YES: Final = "Yes"
NO: Final = "No"
_MESSAGE_KINDS: Final = frozenset({"select", "confirm"})
_LEVELS: Final = {
    "info": types.MessageType.Info,
    "warning": types.MessageType.Warning,
    "error": types.MessageType.Error,
}


class LspQuestioner:
    """Asks an LSP client the agent's dialogs, as far as the client declared it can answer."""

    def __init__(self, client: ClientRequests, answers: ClientAnswers) -> None:
        self._client = client
        self._answers = answers

    def can_ask(self, kind: DialogKind) -> bool:
        return self._answers.questions or (self._answers.message_requests and kind in _MESSAGE_KINDS)

    async def __call__(self, question: Question) -> DialogReply:
        if self._answers.questions:
            params = question.params().model_dump(mode="json", by_alias=True, exclude_none=True)
            return _read_answer(await self._client.send(contract.ASK, params))
        dialog = question.dialog
        text = dialog.title if not dialog.message else f"{dialog.title}\n{dialog.message}"
        if dialog.kind == "confirm":
            chosen = await self._client.choose(types.MessageType.Warning, text, [YES, NO])
            return DialogReply(confirmed=chosen == YES) if chosen else DIALOG_CANCELLED
        chosen = await self._client.choose(types.MessageType.Info, text, list(dialog.options))
        return DialogReply(value=chosen) if chosen is not None else DIALOG_CANCELLED

    def notify(self, run_id: str, dialog: Dialog) -> None:
        level = _LEVELS.get(dialog.level, types.MessageType.Info)
        shown = types.ShowMessageParams(type=level, message=dialog.title)
        self._client.notify(types.WINDOW_SHOW_MESSAGE, shown)


def _read_answer(result: object) -> DialogReply:
    """The client's answer to `pi/ask` (questions.py holds it against the dialog asked)."""
    try:
        answer = contract.AskAnswer.model_validate(result)
    except ValidationError as exc:
        log.warning("pi/ask: not an answer (%s)", exc.errors()[:1])
        return DIALOG_CANCELLED
    if answer.cancelled:
        return DIALOG_CANCELLED
    return DialogReply(value=answer.value, confirmed=answer.confirmed)
