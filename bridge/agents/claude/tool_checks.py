"""Claude Code's permission questions: a `can_use_tool` control request in, a `ToolCheck` out,
and the verdict written back as its `control_response`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bridge.agents.values import AgentTools, ProposedChange, ToolCheck, ToolVerdict

_READ_TOOLS: Final = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead"})
#: WebFetch and WebSearch read nothing local, but what they send (a URL, a query) leaves the machine:
#: a channel out for what the model read. They are "other": asked in `ask` and `auto-edit`,
#: refused in `plan`. Claude Code's own plan mode runs them unasked (its classifier judges them),
#: so a PreToolUse hook (WEB_TOOL_HOOKS, given in `initialize`) answers "ask" for them: each comes
#: to the bridge's gate as a `can_use_tool`, whatever Claude Code's mode.
WEB_TOOLS: Final = ("WebFetch", "WebSearch")
WEB_HOOK_ID: Final = "pi-bridge-web-tools"
WEB_TOOL_HOOKS: Final = {"PreToolUse": [{"matcher": "|".join(WEB_TOOLS), "hookCallbackIds": [WEB_HOOK_ID]}]}
_EDIT_TOOLS: Final = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
_TOOLS: Final = AgentTools(_READ_TOOLS, _EDIT_TOOLS, "Bash")


def tool_check(request: dict[str, Any]) -> ToolCheck | None:
    """The tool call a `can_use_tool` request asks about; None when it does not name one."""
    tool, arguments = request.get("tool_name"), request.get("input")
    if not isinstance(tool, str):
        return None
    arguments = arguments if isinstance(arguments, dict) else {}
    call_id = request.get("tool_use_id")
    return ToolCheck.of_call(
        call_id if isinstance(call_id, str) else "",
        tool,
        arguments,
        tools=_TOOLS,
        path=arguments.get("file_path"),
        change=_change(tool, arguments),
    )


def _change(tool: str, arguments: dict[str, Any]) -> ProposedChange | None:
    """The change a Write ({file_path, content}), an Edit ({file_path, old_string, new_string})
    or a MultiEdit ({file_path, edits: [{old_string, new_string}]}) would make."""
    path = arguments.get("file_path")
    if not isinstance(path, str):
        return None
    if tool == "Write":
        content = arguments.get("content")
        return ProposedChange(path, content=content) if isinstance(content, str) else None
    edits = arguments.get("edits") if tool == "MultiEdit" else [arguments] if tool == "Edit" else []
    pairs: list[tuple[str, str]] = []
    for edit in edits if isinstance(edits, list) else []:
        old, new = (
            (edit.get("old_string"), edit.get("new_string")) if isinstance(edit, dict) else (None, None)
        )
        if isinstance(old, str) and isinstance(new, str):
            pairs.append((old, new))
    return ProposedChange(path, replacements=tuple(pairs)) if pairs else None


def hook_answer_line(request_id: str, request: dict[str, Any]) -> bytes | None:
    """The answer to Claude Code's `hook_callback` for the web tools' hook: "ask", so the call
    goes to the permission check; None for a hook the bridge did not give."""
    if request.get("callback_id") != WEB_HOOK_ID:
        return None
    output = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": "it sends data off this machine",
        }
    }
    response = {"subtype": "success", "request_id": request_id, "response": output}
    return orjson.dumps({"type": "control_response", "response": response}) + b"\n"


def answer_line(request_id: str, verdict: ToolVerdict, *, tool_input: dict[str, Any]) -> bytes:
    """The `control_response` line that gives Claude Code `verdict` on request `request_id`."""
    if verdict.allow:
        answer: dict[str, Any] = {"behavior": "allow", "updatedInput": tool_input}
    else:
        answer = {"behavior": "deny", "message": verdict.reason or "denied"}
    response = {"subtype": "success", "request_id": request_id, "response": answer}
    return orjson.dumps({"type": "control_response", "response": response}) + b"\n"
