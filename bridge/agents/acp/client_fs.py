"""The ACP client's `fs/*` half: an agent's reads and writes done by the run's file operations.

They go through the same `DoFileOp` as pi's own tools (bridge/policy/file_ops.py): path policy,
the sandbox's write rules, the editor's buffers; the turn's checkpoint covers what they wrote.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bridge.agents.values import DoFileOp, FileOp

#: The ACP methods of this half, as the client capability they need.
FS_METHODS: Final = frozenset({"fs/read_text_file", "fs/write_text_file"})


def fs_op(method: str, params: Any, tool_call_id: str) -> FileOp | None:
    """The file operation an `fs/*` request asks for; None when its params are not one."""
    if not isinstance(params, dict) or not isinstance(params.get("path"), str):
        return None
    path = params["path"]
    if method == "fs/read_text_file":
        return FileOp(tool_call_id, "read", "read", path)
    content = params.get("content")
    if method != "fs/write_text_file" or not isinstance(content, str):
        return None
    return FileOp(tool_call_id, "write", "write", path, data=content.encode())


async def fs_answer(request_id: Any, op: FileOp, params: dict[str, Any], file_ops: DoFileOp) -> bytes:
    """The JSON-RPC answer to one `fs/*` request, once the run's file operations did it.

    A read of a file that does not exist is answered empty: Gemini CLI reads a file before it
    writes it, and takes an error there as the write failing."""
    result = await file_ops(op)
    if op.op == "write":
        return _answer(request_id, error=result.error) if result.error else _answer(request_id, {})
    if result.error is not None:
        kind = await file_ops(FileOp(op.tool_call_id, "kind", "kind", op.path))
        if kind.error is None and kind.kind == "missing":
            return _answer(request_id, {"content": ""})
        return _answer(request_id, error=result.error)
    text = (result.data or b"").decode(errors="replace")
    return _answer(request_id, {"content": _lines(text, params.get("line"), params.get("limit"))})


def _lines(text: str, line: Any, limit: Any) -> str:
    """The part of `text` a read asked for: from 1-based `line`, at most `limit` lines."""
    if not isinstance(line, int) and not isinstance(limit, int):
        return text
    lines = text.splitlines(keepends=True)
    start = max(line - 1, 0) if isinstance(line, int) else 0
    end = start + limit if isinstance(limit, int) and limit >= 0 else None
    return "".join(lines[start:end])


def _answer(request_id: Any, result: Any = None, *, error: str | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = {"code": -32000, "message": error}
    else:
        message["result"] = result
    return orjson.dumps(message) + b"\n"


def refused(request_id: Any, reason: str) -> bytes:
    """The answer to an `fs/*` request the bridge does not do (why, for the agent's tool)."""
    return _answer(request_id, error=f"refused: {reason}")
