"""The agent's dialogs read from pi's requests, and the user's answers held against them."""

from __future__ import annotations

import anyio
import orjson
import pytest

from bridge.agents.pi.dialogs import MAX_OPTIONS, MAX_TITLE, dialog_of, reply_line
from bridge.agents.values import DIALOG_CANCELLED, Dialog, DialogKind, DialogReply
from bridge.policy.questions import Question, checked, dialogs_for
from tests.support.runs import make_run


def test_a_select_reads_its_options_bounded() -> None:
    request = {
        "method": "select",
        "title": "t" * 10_000,
        "options": [str(n) for n in range(1000)],
        "timeout": 5,
    }
    dialog = dialog_of(request)
    assert dialog is not None and dialog.kind == "select"
    assert len(dialog.title) == MAX_TITLE and len(dialog.options) == MAX_OPTIONS
    assert dialog.timeout_ms == 5


@pytest.mark.parametrize(
    "request_",
    [
        {"method": "select", "title": "nothing to pick"},
        {"method": "select", "title": "x", "options": "not a list"},
        {"method": "setWidget"},
        {"method": None},
    ],
)
def test_a_request_that_is_no_dialog_reads_as_none(request_: dict[str, object]) -> None:
    assert dialog_of(request_) is None


@pytest.mark.parametrize("timeout", [True, -1, 0, "100", 1.5])
def test_a_timeout_that_is_not_a_positive_integer_is_none(timeout: object) -> None:
    dialog = dialog_of({"method": "confirm", "title": "x", "timeout": timeout})
    assert dialog is not None and dialog.timeout_ms is None


def test_notify_levels_outside_the_three_are_info() -> None:
    dialog = dialog_of({"method": "notify", "message": "hi", "notifyType": "shout"})
    assert dialog == Dialog(kind="notify", title="hi", level="info")


@pytest.mark.parametrize(
    ("reply", "line"),
    [
        (DIALOG_CANCELLED, {"cancelled": True}),
        (DialogReply(confirmed=False), {"confirmed": False}),
        (DialogReply(value=""), {"value": ""}),
        (DialogReply(), {"cancelled": True}),
    ],
)
def test_reply_lines(reply: DialogReply, line: dict[str, object]) -> None:
    written = orjson.loads(reply_line("id-1", reply))
    assert written == {"type": "extension_ui_response", "id": "id-1", **line}


@pytest.mark.parametrize(
    ("kind", "reply", "expected"),
    [
        ("select", DialogReply(value="b"), DialogReply(value="b")),
        ("select", DialogReply(value="z"), DIALOG_CANCELLED),
        ("select", DialogReply(confirmed=True), DIALOG_CANCELLED),
        ("confirm", DialogReply(value="yes"), DIALOG_CANCELLED),
        ("confirm", DialogReply(confirmed=True, value="x"), DialogReply(confirmed=True)),
        ("input", DialogReply(value="free text"), DialogReply(value="free text")),
        ("editor", DialogReply(value="a", cancelled=True), DIALOG_CANCELLED),
    ],
)
def test_an_answer_must_answer_the_dialog_asked(
    kind: DialogKind, reply: DialogReply, expected: DialogReply
) -> None:
    dialog = Dialog(kind=kind, title="t", options=("a", "b") if kind == "select" else ())
    assert checked(dialog, reply) == expected


class _Slow:
    """A questioner that never answers, and counts its waits that were cancelled."""

    def __init__(self) -> None:
        self.withdrawn = 0

    def can_ask(self, kind: DialogKind) -> bool:
        return kind != "editor"

    async def __call__(self, question: Question) -> DialogReply:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.withdrawn += 1
            raise
        raise AssertionError("unreachable")

    def notify(self, run_id: str, dialog: Dialog) -> None:
        raise RuntimeError("a broken front")


async def test_a_cancel_or_a_timeout_ends_the_wait_and_withdraws_the_question() -> None:
    run, sent = make_run("r1", "/srv/project")
    slow = _Slow()
    answer = dialogs_for(run, slow)
    assert await answer(Dialog(kind="confirm", title="t", timeout_ms=20)) == DIALOG_CANCELLED
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(answer, Dialog(kind="confirm", title="t"))
        await anyio.wait_all_tasks_blocked()
        run.cancel.cancel()
    assert slow.withdrawn == 2


async def test_a_kind_the_front_cannot_ask_is_cancelled_at_once_with_a_notice() -> None:
    run, sent = make_run("r1", "/srv/project")
    assert await dialogs_for(run, _Slow())(Dialog(kind="editor", title="Edit it")) == DIALOG_CANCELLED
    assert await dialogs_for(run, None)(Dialog(kind="confirm", title="Sure?")) == DIALOG_CANCELLED
    notices = [m["content"]["text"] for m in sent if m["type"] == "notice"]
    assert len(notices) == 2 and "Edit it" in notices[0] and "Sure?" in notices[1], notices
