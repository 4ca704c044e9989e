"""Lone surrogates in a parsed frame: where one is, and the JSON-RPC error a front answers for it."""

from __future__ import annotations

from typing import Any, NamedTuple

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
PROBLEM = "holds a lone surrogate (half of a UTF-16 pair; send whole characters)"


class Refusal(NamedTuple):
    """The answer to a frame holding a lone surrogate: `code` and `message`, under `msg_id`
    (None: id null), naming `field` (within params for -32602). `answer` is False for a
    notification or a response: those get none."""

    code: int
    message: str
    msg_id: Any
    answer: bool
    field: str


def lone_surrogate_at(value: Any) -> list[str | int] | None:
    """The path (keys and indexes) to the first string or key holding a lone surrogate, if any."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:  # iterative: a frame may be nested as deep as the parser allowed
        path, item = stack.pop()
        if isinstance(item, str):
            if _lone(item):
                return path
        elif isinstance(item, dict):
            for key, inner in reversed(item.items()):
                if _lone(key):
                    return [*path, key]
                stack.append(([*path, key], inner))
        elif isinstance(item, list):
            stack.extend(([*path, index], inner) for index, inner in reversed(list(enumerate(item))))
    return None


def dotted(path: list[str | int]) -> str:
    """A path as `a.b.0.c`, every key made printable (a surrogate shown as its escape)."""
    return ".".join(
        str(part) if isinstance(part, int) else part.encode("utf-8", "backslashreplace").decode()
        for part in path
    )


def refusal(message: Any) -> Refusal | None:
    """The error for a parsed frame that holds a lone surrogate; None when it holds none.

    An id holding one cannot be answered under: -32600 with id null (JSON-RPC's rule for an id
    that cannot be used). Otherwise a request is answered under its id: -32602 naming the field
    when it is in params, else -32600 naming the member.
    """
    path = lone_surrogate_at(message)
    if path is None:
        return None
    if not isinstance(message, dict):
        field = dotted(path) or "the frame"
        return Refusal(INVALID_REQUEST, f"invalid request: {field}: {PROBLEM}", None, True, field)
    if path[0] == "id":
        return Refusal(INVALID_REQUEST, f"invalid request: id: {PROBLEM}", None, "method" in message, "id")
    answer = "method" in message and "id" in message
    msg_id = message["id"] if answer else None
    if path[0] == "params" and len(path) > 1:
        field = dotted(path[1:])
        return Refusal(INVALID_PARAMS, f"invalid params: {field}: {PROBLEM}", msg_id, answer, field)
    field = dotted(path)
    return Refusal(INVALID_REQUEST, f"invalid request: {field}: {PROBLEM}", msg_id, answer, field)


def _lone(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
