"""pi's side of the gate: the bridge's extension asks before each tool, through an input dialog."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final, cast

import orjson

from bridge.agents.values import (
    AgentTools,
    FileOp,
    FileOpName,
    FileOpResult,
    ProposedChange,
    ToolCheck,
    ToolVerdict,
)

MARKER: Final = "pi-bridge:permission"
FS_MARKER: Final = "pi-bridge:fs"
#: The bash tool hands its command over for the editor's terminal: `{toolCallId, op: "exec",
#: cwd, command}`, `{toolCallId, op: "poll"|"kill", terminalId}`; answered `{"error"}`,
#: `{"local": true}` (run it yourself) or `{terminalId?, output?, done?, exitCode?, signal?}`.
BASH_MARKER: Final = "pi-bridge:bash"
_COMMAND_OPS: Final[frozenset[str]] = frozenset({"exec", "poll", "kill"})
_FILE_OPS: Final[frozenset[str]] = frozenset(
    {"read", "access", "write", "mkdir", "kind", "listdir", "search"}
)
_READ_TOOLS: Final = frozenset({"read", "grep", "find", "ls"})
_EDIT_TOOLS: Final = frozenset({"edit", "write"})
_TOOLS: Final = AgentTools(_READ_TOOLS, _EDIT_TOOLS, "bash")


def is_gate_request(request: dict[str, Any]) -> bool:
    """Whether an `extension_ui_request` is the gate asking (not a user extension's dialog)."""
    return request.get("method") == "input" and request.get("title") == MARKER


def tool_check(request: dict[str, Any]) -> ToolCheck | None:
    """The tool call a gate request asks about; None when its payload is not one."""
    payload = _payload(request)
    if payload is None:
        return None
    call_id, tool, arguments = payload.get("toolCallId"), payload.get("toolName"), payload.get("input")
    if not isinstance(call_id, str) or not isinstance(tool, str):
        return None
    arguments = arguments if isinstance(arguments, dict) else {}
    path = payload.get("resolvedPath")
    if not isinstance(path, str):
        path = arguments.get("path")
    return ToolCheck.of_call(
        call_id, tool, arguments, tools=_TOOLS, path=path, change=_change(tool, arguments)
    )


def is_fs_request(request: dict[str, Any]) -> bool:
    """Whether an `extension_ui_request` is a file tool handing an operation over."""
    return request.get("method") == "input" and request.get("title") == FS_MARKER


def file_op(request: dict[str, Any]) -> FileOp | None:
    """The file operation a request hands over; None when its payload is not one."""
    payload = _payload(request)
    if payload is None:
        return None
    call_id, tool, op, path = (payload.get(k) for k in ("toolCallId", "tool", "op", "path"))
    if not all(isinstance(v, str) for v in (call_id, tool, op, path)) or op not in _FILE_OPS:
        return None
    data = payload.get("data")
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        return None
    return FileOp(
        str(call_id), str(tool), cast(FileOpName, op), str(path), data=raw, write=payload.get("write") is True
    )


def is_command_request(request: dict[str, Any]) -> bool:
    """Whether an `extension_ui_request` is the bash tool handing its command over."""
    return request.get("method") == "input" and request.get("title") == BASH_MARKER


def command_op(request: dict[str, Any]) -> FileOp | None:
    """The command operation a request hands over; None when its payload is not one."""
    payload = _payload(request)
    if payload is None:
        return None
    call_id, op = payload.get("toolCallId"), payload.get("op")
    if not isinstance(call_id, str) or op not in _COMMAND_OPS:
        return None
    if op == "exec":
        cwd, command = payload.get("cwd"), payload.get("command")
        if not isinstance(cwd, str) or not isinstance(command, str):
            return None
        return FileOp(call_id, "bash", "exec", cwd, command=command)
    terminal_id = payload.get("terminalId")
    if not isinstance(terminal_id, str):
        return None
    return FileOp(call_id, "bash", cast(FileOpName, op), "", terminal_id=terminal_id)


def _payload(request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON object a dialog request carries as its placeholder; None when it carries none."""
    try:
        payload = orjson.loads(str(request.get("placeholder") or ""))
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def fs_answer_line(request_id: str, result: FileOpResult) -> bytes:
    """The `extension_ui_response` line that gives a file tool the result of its operation."""
    value: dict[str, Any] = {}
    if result.error is not None:
        value["error"] = result.error
    if result.data is not None:
        value["data"] = base64.b64encode(result.data).decode()
    if result.kind is not None:
        value["kind"] = result.kind
    if result.names is not None:
        value["names"] = list(result.names)
    if result.local:
        value["local"] = True
    for key, field in (
        ("terminalId", result.terminal_id),
        ("output", result.output),
        ("exitCode", result.exit_code),
        ("signal", result.signal),
    ):
        if field is not None:
            value[key] = field
    if result.done:
        value["done"] = True
    reply = {"type": "extension_ui_response", "id": request_id, "value": orjson.dumps(value).decode()}
    return orjson.dumps(reply) + b"\n"


def _change(tool: str, arguments: dict[str, Any]) -> ProposedChange | None:
    """The change a `write` ({path, content}) or an `edit` ({path, edits: [{oldText, newText}]},
    or one oldText/newText pair at the top, as some models send it) would make (its path as the
    model gave it, for the user: the bridge reads the file at the path it judged)."""
    path = arguments.get("path")
    if not isinstance(path, str):
        return None
    if tool == "write":
        content = arguments.get("content")
        return ProposedChange(path, content=content) if isinstance(content, str) else None
    if tool != "edit":
        return None
    edits = arguments.get("edits")
    pairs = edits if isinstance(edits, list) else [arguments]
    replacements = tuple(
        (pair["oldText"], pair["newText"])
        for pair in pairs
        if isinstance(pair, dict)
        and isinstance(pair.get("oldText"), str)
        and isinstance(pair.get("newText"), str)
    )
    return ProposedChange(path, replacements=replacements) if replacements else None


def answer_line(request_id: str, verdict: ToolVerdict) -> bytes:
    """The `extension_ui_response` line that gives the extension `verdict`."""
    value: dict[str, Any] = {"decision": "allow" if verdict.allow else "deny"}
    if verdict.reason:
        value["reason"] = verdict.reason
    reply = {"type": "extension_ui_response", "id": request_id, "value": orjson.dumps(value).decode()}
    return orjson.dumps(reply) + b"\n"
