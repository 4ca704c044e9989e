"""Claude Code's AskUserQuestion tool as the bridge's dialogs: each question a select, the labels
chosen given back as the call's `answers` (keyed by the question's text, as the Agent SDK does).
"""

from __future__ import annotations

from typing import Any, Final

from bridge.agents.values import AskDialog, Dialog

ASK_USER_TOOL: Final = "AskUserQuestion"


async def ask(arguments: dict[str, Any], dialogs: AskDialog) -> dict[str, str] | None:
    """The user's answer to each question (None: one was not answered)."""
    listed = arguments.get("questions")
    answers: dict[str, str] = {}
    for question in listed if isinstance(listed, list) else []:
        if not isinstance(question, dict) or not isinstance(question.get("question"), str):
            continue
        options = question.get("options")
        labels = tuple(
            str(option["label"])
            for option in (options if isinstance(options, list) else [])
            if isinstance(option, dict) and option.get("label")
        )
        header = question.get("header")
        reply = await dialogs(
            Dialog(
                kind="select",
                title=question["question"],
                message=str(header) if header else None,
                options=labels,
            )
        )
        if reply.cancelled or reply.value is None:
            return None
        answers[question["question"]] = reply.value
    return answers or None
