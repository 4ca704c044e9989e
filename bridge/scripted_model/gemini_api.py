"""The Gemini API (``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``), which Gemini CLI
speaks: its request read into the chat-completions shape the scenarios read, and a reply rendered
as its SSE chunks (or, for ``:generateContent``, one JSON answer).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any, Final

from bridge.scripted_model.formats import Frame, estimate_tokens
from bridge.scripted_model.reply import Reply, wire_json

#: ``.../models/<model>:<method>``: the model id and the method a Gemini path names.
_GEMINI_PATH: Final = re.compile(r"/models/([^/:]+):([A-Za-z]+)$")

#: The text part Gemini CLI puts before the first prompt of a session.
_CONTEXT_PREFIX: Final = "<session_context>"
_FINISH: Final = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}


def gemini_call(path: str) -> tuple[str, str] | None:
    """The (model, method) a Gemini API path names (``streamGenerateContent``,
    ``generateContent``, ``countTokens``), None for another path."""
    match = _GEMINI_PATH.search(path)
    return (match.group(1), match.group(2)) if match else None


def _response_text(response: object) -> str:
    """A functionResponse's ``response`` as the tool result text: its ``output`` (or ``error``)
    when it has one, else the whole object as JSON."""
    if isinstance(response, dict):
        for key in ("output", "error", "content"):
            value = response.get(key)
            if isinstance(value, str):
                return value
    return wire_json(response)


def _system_text(system: object) -> str:
    """The text of a ``systemInstruction`` (a content with parts, or a string)."""
    if isinstance(system, str):
        return system
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list):
        return ""
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _part_message(part: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """What one part becomes: ("block", a content block), ("call", a tool call) or ("result",
    a ``tool`` message); None for a thought or an unknown part."""
    if isinstance(part.get("text"), str) and not part.get("thought"):
        return "block", {"type": "text", "text": part["text"]}
    if isinstance(part.get("inlineData"), dict):
        data = part["inlineData"]
        url = f"data:{data.get('mimeType')};base64,{data.get('data')}"
        return "block", {"type": "image_url", "image_url": {"url": url}}
    if isinstance(part.get("functionCall"), dict):
        call = part["functionCall"]
        function = {"name": call.get("name"), "arguments": wire_json(call.get("args", {}))}
        return "call", {"id": call.get("id"), "type": "function", "function": function}
    if isinstance(part.get("functionResponse"), dict):
        answer = part["functionResponse"]
        text = _response_text(answer.get("response"))
        return "result", {"role": "tool", "tool_call_id": answer.get("id"), "content": text}
    return None


def _content_messages(content: dict[str, Any]) -> list[dict[str, Any]]:
    """One Gemini content as chat messages: its text and images, its calls, its results."""
    role = "assistant" if content.get("role") == "model" else "user"
    found: dict[str, list[dict[str, Any]]] = {"block": [], "call": [], "result": []}
    for part in content["parts"]:
        message = _part_message(part) if isinstance(part, dict) else None
        if message is not None:
            found[message[0]].append(message[1])
    messages: list[dict[str, Any]] = []
    blocks = found["block"]
    context = [b for b in blocks if str(b.get("text", "")).startswith(_CONTEXT_PREFIX)]
    if context:
        # Gemini CLI sends its session context and the prompt as parts of one user message:
        # a message of its own, so the prompt alone is the user's text.
        messages.append({"role": role, "content": context})
        blocks = [b for b in blocks if b not in context]
    if blocks:
        messages.append({"role": role, "content": blocks})
    if found["call"]:
        messages.append({"role": "assistant", "content": None, "tool_calls": found["call"]})
    return messages + found["result"]


def chat_shape(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """A Gemini request read as a chat-completions one: ``systemInstruction`` as the system
    message, ``contents`` as messages (functionCall parts as tool calls, functionResponse parts
    as ``tool`` messages), and the function declarations as offered tools."""
    system = _system_text(body.get("systemInstruction"))
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    contents = body.get("contents")
    for content in contents if isinstance(contents, list) else []:
        if isinstance(content, dict) and isinstance(content.get("parts"), list):
            messages += _content_messages(content)
    tools: list[dict[str, Any]] = []
    groups = body.get("tools")
    for group in groups if isinstance(groups, list) else []:
        declarations = group.get("functionDeclarations") if isinstance(group, dict) else None
        for declaration in declarations if isinstance(declarations, list) else []:
            if isinstance(declaration, dict):
                schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
                tools.append({"name": declaration.get("name"), "parameters": schema})
    return {"model": model, "system": system, "messages": messages, "tools": tools}


def _chunks(reply: Reply) -> Iterator[dict[str, Any]]:
    """The reply's parts, one per piece (a function call once its arguments are complete; a call
    cut short by a reply with no end is not sent)."""
    name: str | None = None
    arguments = ""

    def call_part() -> dict[str, Any]:
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = {"raw": arguments}
        return {"functionCall": {"name": name, "args": args, "id": "call_" + uuid.uuid4().hex[:12]}}

    for piece in reply.pieces:
        if piece.kind == "tool_args":
            name = name or "bash"
            arguments += piece.text
            continue
        if name is not None:
            yield call_part()
            name, arguments = None, ""
        if piece.kind == "tool_start":
            name = piece.text
        elif piece.kind == "thinking":
            yield {"text": piece.text, "thought": True}
        else:
            yield {"text": piece.text}
    if name is not None and reply.finish is not None:
        yield call_part()


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    prompt = estimate_tokens(body)
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": len(reply.pieces),
        "totalTokenCount": prompt + len(reply.pieces),
    }


def gemini_frames(model: str, reply: Reply, body: dict[str, Any], delay: float) -> Iterator[Frame]:
    """SSE frames of ``reply`` as ``GenerateContentResponse`` chunks, the last with the finish
    reason and usage."""
    response_id = uuid.uuid4().hex[:16]

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        obj: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
        if finish is not None:
            candidate["finishReason"] = finish
            obj["usageMetadata"] = _usage(body, reply)
        return f"data: {wire_json(obj)}\n\n".encode()

    parts = list(_chunks(reply))
    if reply.finish is None:
        for part in parts:
            yield Frame(chunk([part]), delay)
        return
    parts = parts or [{"text": ""}]
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        yield Frame(chunk([part], _FINISH[reply.finish] if last else None), delay)


def gemini_whole(model: str, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    """The reply as one ``generateContent`` answer: every part, the finish reason and usage."""
    parts = list(_chunks(reply))
    merged: list[dict[str, Any]] = []
    for part in parts:
        if merged and set(part) == {"text"} and set(merged[-1]) == {"text"}:
            merged[-1] = {"text": merged[-1]["text"] + part["text"]}
        else:
            merged.append(part)
    candidate = {
        "content": {"role": "model", "parts": merged or [{"text": ""}]},
        "finishReason": _FINISH[reply.finish or "stop"],
        "index": 0,
    }
    return {"candidates": [candidate], "usageMetadata": _usage(body, reply), "modelVersion": model}
