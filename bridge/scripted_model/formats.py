"""The wire formats a reply is rendered in: OpenAI chat-completion chunks and Anthropic Messages
events, both as SSE, and each API's error bodies (responses_api.py and gemini_api.py render the
OpenAI Responses and Gemini streams)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from bridge.scripted_model.reply import Api, ErrorReply, Piece, Reply, wire_json
from bridge.scripted_model.request_body import request_messages
from bridge.scripted_model.scenarios import ANTHROPIC_SIGNATURE


def estimate_tokens(body: dict[str, Any]) -> int:
    """A rough token count of the request's messages."""
    return max(1, len(wire_json(request_messages(body))) // 4)


_OPENAI_ERROR_TYPES: Final = {
    "server": ("server_error", None),
    "rate_limit": ("rate_limit_exceeded", "rate_limit_exceeded"),
    "auth": ("invalid_request_error", "invalid_api_key"),
    "not_found": ("invalid_request_error", "model_not_found"),
    "bad_request": ("invalid_request_error", None),
}
_ANTHROPIC_ERROR_TYPES: Final = {
    "server": "api_error",
    "rate_limit": "rate_limit_error",
    "auth": "authentication_error",
    "not_found": "not_found_error",
    "bad_request": "invalid_request_error",
}

_GEMINI_STATUS: Final = {
    "server": "INTERNAL",
    "rate_limit": "RESOURCE_EXHAUSTED",
    "auth": "UNAUTHENTICATED",
    "not_found": "NOT_FOUND",
    "bad_request": "INVALID_ARGUMENT",
}


def error_body(api: Api, error: ErrorReply) -> dict[str, Any]:
    """The JSON body of an error answer in the given API's format."""
    if api == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": _ANTHROPIC_ERROR_TYPES[error.kind],
                "message": error.message,
            },
        }
    if api == "gemini":
        status = _GEMINI_STATUS[error.kind]
        return {"error": {"code": error.status, "message": error.message, "status": status}}
    err_type, code = _OPENAI_ERROR_TYPES[error.kind]
    return {
        "error": {
            "message": error.message,
            "type": err_type,
            "param": None,
            "code": code,
        }
    }


@dataclass(frozen=True)
class Frame:
    """One SSE event on the wire, sent after pausing ``pause`` seconds."""

    data: bytes
    pause: float


def openai_frames(model: str, reply: Reply, body: dict[str, Any], delay: float) -> Iterator[Frame]:
    """SSE frames of ``reply`` as OpenAI ``chat.completion.chunk`` objects."""
    chunk_id = "chatcmpl-" + uuid.uuid4().hex[:12]
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return f"data: {wire_json(obj)}\n\n".encode()

    yield Frame(chunk({"role": "assistant", "content": ""}), 0.0)
    tool_index = -1
    for piece in reply.pieces:
        if piece.kind == "thinking":
            delta: dict[str, Any] = {"reasoning_content": piece.text}
        elif piece.kind == "text":
            delta = {"content": piece.text}
        elif piece.kind == "tool_start":
            tool_index += 1
            call = {
                "index": tool_index,
                "id": "call_" + uuid.uuid4().hex[:8],
                "type": "function",
                "function": {"name": piece.text, "arguments": ""},
            }
            delta = {"tool_calls": [call]}
        else:
            delta = {"tool_calls": [{"index": tool_index, "function": {"arguments": piece.text}}]}
        yield Frame(chunk(delta), delay)
    if reply.finish is None:
        return
    yield Frame(chunk({}, reply.finish), delay)
    prompt_tokens = estimate_tokens(body)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(reply.pieces),
        "total_tokens": prompt_tokens + len(reply.pieces),
    }
    final = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_scripted",
        "choices": [],
        "usage": usage,
    }
    yield Frame(f"data: {wire_json(final)}\n\n".encode(), 0.0)
    yield Frame(b"data: [DONE]\n\n", 0.0)


_ANTHROPIC_STOP: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
}


def _anthropic_event(name: str, obj: dict[str, Any], pause: float = 0.0) -> Frame:
    """One Anthropic SSE event: its name, and its data with the name as ``type``."""
    return Frame(f"event: {name}\ndata: {wire_json({'type': name, **obj})}\n\n".encode(), pause)


def _anthropic_message(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The message ``message_start`` opens: no content yet, the request's estimated input tokens."""
    input_tokens = estimate_tokens(body)
    return {
        "id": "msg_" + uuid.uuid4().hex[:12],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }


def _anthropic_block(piece: Piece) -> dict[str, Any]:
    """The empty content block a piece opens (a tool's argument piece opens a ``bash`` call)."""
    if piece.kind == "thinking":
        return {
            "type": "thinking",
            "thinking": "",
            "signature": "",
        }
    if piece.kind == "text":
        return {"type": "text", "text": ""}
    name = piece.text if piece.kind == "tool_start" else "bash"
    return {
        "type": "tool_use",
        "id": "toolu_" + uuid.uuid4().hex[:12],
        "name": name,
        "input": {},
    }


def _anthropic_delta(piece: Piece) -> dict[str, Any]:
    """The delta that adds a piece's text to its open block."""
    if piece.kind == "thinking":
        return {"type": "thinking_delta", "thinking": piece.text}
    if piece.kind == "text":
        return {"type": "text_delta", "text": piece.text}
    return {"type": "input_json_delta", "partial_json": piece.text}


def _anthropic_close(index: int, open_kind: str | None) -> Iterator[Frame]:
    """The events that end the open block, if any (a thinking block first gets its signature)."""
    if open_kind == "thinking":
        # Real Anthropic sends the signature as the last delta of a thinking block.
        sig = {"type": "signature_delta", "signature": ANTHROPIC_SIGNATURE}
        yield _anthropic_event("content_block_delta", {"index": index, "delta": sig})
    if open_kind is not None:
        yield _anthropic_event("content_block_stop", {"index": index})


def anthropic_frames(model: str, reply: Reply, body: dict[str, Any], delay: float) -> Iterator[Frame]:
    """SSE frames of ``reply`` as Anthropic Messages stream events."""
    yield _anthropic_event("message_start", {"message": _anthropic_message(model, body)})
    yield _anthropic_event("ping", {})
    index = -1
    open_kind: str | None = None
    for piece in reply.pieces:
        wanted = "tool" if piece.kind in ("tool_start", "tool_args") else piece.kind
        if piece.kind == "tool_start" or wanted != open_kind:
            yield from _anthropic_close(index, open_kind)
            index += 1
            open_kind = wanted
            block = _anthropic_block(piece)
            yield _anthropic_event("content_block_start", {"index": index, "content_block": block}, delay)
            if piece.kind == "tool_start":
                continue
        yield _anthropic_event(
            "content_block_delta", {"index": index, "delta": _anthropic_delta(piece)}, delay
        )
    if reply.finish is None:
        return
    yield from _anthropic_close(index, open_kind)
    stop = {"stop_reason": _ANTHROPIC_STOP[reply.finish], "stop_sequence": None}
    usage = {"output_tokens": len(reply.pieces)}
    yield _anthropic_event("message_delta", {"delta": stop, "usage": usage}, delay)
    yield _anthropic_event("message_stop", {})
