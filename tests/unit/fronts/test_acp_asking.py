"""The ACP front's approvals, dialogs and modes, without a connection: what goes to the client
and how its answers are read (anything not an answer to what was asked is no answer)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from bridge.agents.values import DIALOG_CANCELLED, Dialog, DialogReply
from bridge.contract import PermissionMode, PermissionOption, ProposedDiff
from bridge.fronts.acp.approver import permission_request, read_answer
from bridge.fronts.acp.client_requests import client_answers
from bridge.fronts.acp.questioner import dialog_request, read_choice, read_form_answer
from bridge.fronts.acp.session.modes import MODES, mode_of, mode_option, mode_state
from bridge.policy.approvals import CANCELLED, ApprovalAnswer, ApprovalRequest

REQUEST = ApprovalRequest(
    run_id="r1",
    session_id="s1",
    tool_call_id="t1",
    tool="write",
    kind="edit",
    title="write notes.md",
    input={"path": "notes.md", "content": "new\n"},
    diff=ProposedDiff(path="notes.md", old_text="old\n", new_text="new\n"),
    options=(
        PermissionOption(option_id="allow-once", kind="allow_once", name="Allow"),
        PermissionOption(option_id="reject-once", kind="reject_once", name="Deny"),
    ),
)


def _selected(option_id: Any) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


def test_a_permission_request_carries_the_options_as_offered_and_the_diff() -> None:
    wire = permission_request(REQUEST, "s1", "/project").model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert [(o["optionId"], o["kind"], o["name"]) for o in wire["options"]] == [
        ("allow-once", "allow_once", "Allow"),
        ("reject-once", "reject_once", "Deny"),
    ]
    call = wire["toolCall"]
    assert (call["toolCallId"], call["title"], call["kind"]) == ("t1", "write notes.md", "edit")
    assert call["rawInput"] == {"path": "notes.md", "content": "new\n"}
    assert call["content"] == [
        {"type": "diff", "path": "/project/notes.md", "oldText": "old\n", "newText": "new\n"}
    ]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (_selected("allow-once"), ApprovalAnswer(option_id="allow-once")),
        (_selected("reject-once"), ApprovalAnswer(option_id="reject-once")),
        (_selected("allow-always"), CANCELLED),  # not offered
        (_selected(7), CANCELLED),
        ({"outcome": {"outcome": "cancelled"}}, CANCELLED),
        ({"outcome": "selected"}, CANCELLED),
        ({}, CANCELLED),
        (None, CANCELLED),
        ("allow-once", CANCELLED),
    ],
)
def test_only_an_offered_option_is_an_answer(result: Any, expected: ApprovalAnswer) -> None:
    assert read_answer(REQUEST, result) == expected


def test_a_confirm_is_yes_or_no_and_nothing_else() -> None:
    dialog = Dialog(kind="confirm", title="Sure?")
    request = dialog_request("s1", dialog)
    assert [o.name for o in request.options] == ["Yes", "No"]
    assert read_choice(dialog, _selected("yes")) == DialogReply(confirmed=True)
    assert read_choice(dialog, _selected("no")) == DialogReply(confirmed=False)
    assert read_choice(dialog, _selected("maybe")) == DIALOG_CANCELLED
    assert read_choice(dialog, {"outcome": {"outcome": "cancelled"}}) == DIALOG_CANCELLED


def test_a_select_answers_one_of_its_choices() -> None:
    dialog = Dialog(kind="select", title="Pick", options=("red", "green"))
    request = dialog_request("s1", dialog)
    ids = [o.option_id for o in request.options]
    assert [o.name for o in request.options] == ["red", "green"]
    assert read_choice(dialog, _selected(ids[1])) == DialogReply(value="green")
    for bad in ("choice-2", "choice--1", "choice-x", "green"):
        assert read_choice(dialog, _selected(bad)) == DIALOG_CANCELLED


def test_a_form_answer_is_its_text_field_when_accepted() -> None:
    assert read_form_answer({"action": "accept", "content": {"value": "because"}}) == DialogReply(
        value="because"
    )
    for bad in (
        {"action": "decline"},
        {"action": "accept", "content": {"value": 3}},
        {"action": "accept"},
        None,
    ):
        assert read_form_answer(bad) == DIALOG_CANCELLED


def test_elicitation_is_asked_only_of_a_client_that_declared_forms() -> None:
    assert client_answers({"elicitation": {"form": {}}}).elicitation_form
    assert not client_answers({"elicitation": {"url": {}}}).elicitation_form
    assert not client_answers({}).elicitation_form
    assert not client_answers("nonsense").elicitation_form


def test_every_mode_is_an_acp_session_mode_and_a_mode_option() -> None:
    modes = list(get_args(PermissionMode))
    assert list(MODES) == modes
    state = mode_state("plan")
    assert state.current_mode_id == "plan" and [m.id for m in state.available_modes] == modes
    option = mode_option("ask")
    assert option.category == "mode" and [o.value for o in option.options] == modes
    assert mode_of("auto-edit") == "auto-edit" and mode_of("yolo") is None and mode_of(None) is None
