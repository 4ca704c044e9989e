"""The agent's own dialogs put to the user: an extension's select, confirm, input or editor, and
its notify (docs/protocol.md, `pi/ask`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Protocol

import anyio

from bridge.agents.values import DIALOG_CANCELLED, AskDialog, Dialog, DialogKind, DialogReply, Out
from bridge.contract import AskParams
from bridge.policy.run_view import RunView

#: What a front needs to put a dialog to its user: the seam's dialog types come through here,
#: since fronts see the runs layer, never the agents' seam.
__all__ = [
    "DIALOG_CANCELLED",
    "Dialog",
    "DialogKind",
    "DialogReply",
    "Question",
    "Questioner",
    "checked",
    "dialogs_for",
]

log = logging.getLogger(__name__)

MAX_NOTICE_TITLE: Final = 200


@dataclass(frozen=True)
class Question:
    """One agent dialog of one run, as the front puts it to the user."""

    run_id: str
    session_id: str | None
    dialog: Dialog

    def params(self) -> AskParams:
        """The question as `pi/ask` sends it."""
        dialog = self.dialog
        assert dialog.kind != "notify", "a notify is told, never asked"
        return AskParams(
            run_id=self.run_id,
            session_id=self.session_id,
            kind=dialog.kind,
            title=dialog.title,
            message=dialog.message,
            options=list(dialog.options) if dialog.kind == "select" else None,
            placeholder=dialog.placeholder,
            prefill=dialog.prefill,
            timeout_ms=dialog.timeout_ms,
        )


class Questioner(Protocol):
    """How a front puts the agent's dialogs to its user."""

    def can_ask(self, kind: DialogKind) -> bool:
        """Whether this front's user can answer a dialog of `kind`."""
        ...

    async def __call__(self, question: Question) -> DialogReply:
        """The user's answer; cancelled while it waits, the front withdraws its request."""
        ...

    def notify(self, run_id: str, dialog: Dialog) -> None:
        """Tell the user what the agent's `notify` said (no answer)."""
        ...


def dialogs_for(run: RunView, questioner: Questioner | None) -> AskDialog:
    """How the dialogs of `run`'s agent are answered, through `questioner` (None: no one asks)."""

    async def answer(dialog: Dialog) -> DialogReply:
        if dialog.kind == "notify":
            if questioner is not None:
                questioner.notify(run.run_id, dialog)
            return DIALOG_CANCELLED
        if questioner is None or not questioner.can_ask(dialog.kind):
            run.emit([_unanswerable(dialog)])
            return DIALOG_CANCELLED
        return await _ask(run, questioner, Question(run.run_id, run.session_id, dialog))

    return answer


async def _ask(run: RunView, questioner: Questioner, question: Question) -> DialogReply:
    """The user's checked answer; cancelled at the run's cancel or the dialog's timeout."""
    reply = DIALOG_CANCELLED
    timeout = question.dialog.timeout_ms / 1000 if question.dialog.timeout_ms else None
    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tasks:

            async def wait_for_user() -> None:
                nonlocal reply
                try:
                    reply = checked(question.dialog, await questioner(question))
                except Exception:  # a front that broke while asking: no answer
                    log.exception("asking the user an agent's %s dialog failed", question.dialog.kind)
                tasks.cancel_scope.cancel()

            async def wait_for_cancel() -> None:
                await run.cancel.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(wait_for_user)
            tasks.start_soon(wait_for_cancel)
    return DIALOG_CANCELLED if run.cancel.cancelled else reply


def checked(dialog: Dialog, reply: DialogReply) -> DialogReply:
    """`reply` when it answers `dialog` (a select: one of its options), else cancelled."""
    if reply.cancelled:
        return DIALOG_CANCELLED
    if dialog.kind == "confirm":
        return DialogReply(confirmed=reply.confirmed) if reply.confirmed is not None else DIALOG_CANCELLED
    if reply.value is None or (dialog.kind == "select" and reply.value not in dialog.options):
        return DIALOG_CANCELLED
    return DialogReply(value=reply.value)


def _unanswerable(dialog: Dialog) -> Out:
    title = " ".join(dialog.title.split())[:MAX_NOTICE_TITLE]
    text = f"an extension asked ({dialog.kind}): {title!r}; this client cannot answer, so it was cancelled"
    return Out("notice", {"level": "warning", "text": text})
