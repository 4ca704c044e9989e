"""The OpenAI Responses API (``POST /v1/responses``, streamed), which Codex speaks: its request
read into the chat-completions shape the scenarios read, and a reply rendered as its SSE events.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any, Final

from bridge.scripted_model.formats import Frame, estimate_tokens
from bridge.scripted_model.reply import Reply, wire_json

#: Content block types of a Responses message that carry text.
_TEXT_TYPES = ("input_text", "output_text", "text", "summary_text")


def _chat_content(content: object) -> list[dict[str, Any]] | str:
    """A Responses message's content as chat-completion blocks (text and image_url)."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in _TEXT_TYPES and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            blocks.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
    return blocks


def _output_text(output: object) -> str:
    """A function call's output: a string, or the text of its content items."""
    if isinstance(output, str):
        return output
    blocks = _chat_content(output)
    if isinstance(blocks, str):
        return blocks
    return "".join(b.get("text", "") for b in blocks)


def chat_shape(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request read as a chat-completions one: ``instructions`` as the system message,
    the ``input`` items as messages (function calls and their outputs as tool calls and ``tool``
    messages), and the tools as offered."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            messages.append(
                {
                    "role": role if isinstance(role, str) else "user",
                    "content": _chat_content(item.get("content")),
                }
            )
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments", item.get("input", ""))
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = _output_text(item.get("output"))
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": output})
    system = "\n".join(
        m["content"] if isinstance(m["content"], str) else "".join(b.get("text", "") for b in m["content"])
        for m in messages
        if m.get("role") in ("system", "developer") and m.get("content")
    )
    return {
        "model": body.get("model"),
        "stream": body.get("stream"),
        "system": system,
        "messages": messages,
        "tools": body.get("tools") if isinstance(body.get("tools"), list) else [],
    }


#: The output item each piece kind goes in, and the prefix of its id.
_ITEM_OF: Final = {
    "text": "message",
    "thinking": "reasoning",
    "tool_start": "function_call",
    "tool_args": "function_call",
}
_ID_PREFIX: Final = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}


def _in_namespace(name: str, body: dict[str, Any]) -> dict[str, str]:
    """A call of ``<namespace>__<tool>`` (see `namespaced`) as the Responses API names it."""
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type") != "namespace":
            continue
        space = str(tool.get("name"))
        inner = name.removeprefix(f"{space}__")
        if inner != name and any(
            isinstance(t, dict) and t.get("name") == inner for t in tool.get("tools") or []
        ):
            return {"name": inner, "namespace": space}
    return {"name": name}


def _open_item(kind: str, name: str) -> dict[str, Any]:
    """An output item of ``kind``, empty: a message, a reasoning item or a function call."""
    item_id = _ID_PREFIX[kind] + uuid.uuid4().hex[:12]
    if kind == "message":
        return {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    if kind == "reasoning":
        return {"id": item_id, "type": "reasoning", "summary": []}
    call_id = "call_" + uuid.uuid4().hex[:12]
    return {
        "id": item_id,
        "type": "function_call",
        "status": "in_progress",
        "name": name,
        "call_id": call_id,
        "arguments": "",
    }


def _done_item(item: dict[str, Any], text: str) -> dict[str, Any]:
    """The item complete, with all the text its deltas carried."""
    if item["type"] == "message":
        part = {"type": "output_text", "text": text, "annotations": []}
        return {**item, "status": "completed", "content": [part]}
    if item["type"] == "reasoning":
        return {**item, "summary": [{"type": "summary_text", "text": text}]}
    return {**item, "status": "completed", "arguments": text}


class _Stream:
    """The events of one response: numbered, with the items done so far and the one open."""

    def __init__(self, delay: float, body: dict[str, Any]) -> None:
        self.body = body
        self.sequence = 0
        self.delay = delay
        self.done: list[dict[str, Any]] = []
        self.item: dict[str, Any] | None = None
        self.text = ""

    def frame(self, name: str, obj: dict[str, Any], pause: bool = False) -> Frame:
        """One SSE event, numbered; ``pause``: sent after the reply's per-piece delay."""
        data = {"type": name, "sequence_number": self.sequence, **obj}
        self.sequence += 1
        return Frame(f"event: {name}\ndata: {wire_json(data)}\n\n".encode(), self.delay if pause else 0.0)

    def _where(self) -> dict[str, Any]:
        assert self.item is not None
        where: dict[str, Any] = {"item_id": self.item["id"], "output_index": len(self.done)}
        if self.item["type"] == "message":
            where["content_index"] = 0
        elif self.item["type"] == "reasoning":
            where["summary_index"] = 0
        return where

    def open(self, kind: str, name: str) -> Iterator[Frame]:
        """Close the open item, if any, and open one of ``kind``."""
        yield from self.close()
        self.item = _open_item(kind, name)
        if kind == "function_call":
            self.item.update(_in_namespace(name, self.body))
        self.text = ""
        yield self.frame(
            "response.output_item.added", {"output_index": len(self.done), "item": self.item}, True
        )
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            yield self.frame("response.content_part.added", {**self._where(), "part": part})
        elif kind == "reasoning":
            part = {"type": "summary_text", "text": ""}
            yield self.frame("response.reasoning_summary_part.added", {**self._where(), "part": part})

    def delta(self, text: str) -> Frame:
        """Add ``text`` to the open item."""
        assert self.item is not None
        self.text += text
        name = {
            "message": "response.output_text.delta",
            "reasoning": "response.reasoning_summary_text.delta",
            "function_call": "response.function_call_arguments.delta",
        }[self.item["type"]]
        return self.frame(name, {**self._where(), "delta": text}, True)

    def close(self) -> Iterator[Frame]:
        """The events that finish the open item, if any."""
        if self.item is None:
            return
        where, text = self._where(), self.text
        if self.item["type"] == "message":
            yield self.frame("response.output_text.done", {**where, "text": text})
            part = {"type": "output_text", "text": text, "annotations": []}
            yield self.frame("response.content_part.done", {**where, "part": part})
        elif self.item["type"] == "reasoning":
            yield self.frame("response.reasoning_summary_text.done", {**where, "text": text})
        else:
            yield self.frame("response.function_call_arguments.done", {**where, "arguments": text})
        finished = _done_item(self.item, text)
        yield self.frame("response.output_item.done", {"output_index": len(self.done), "item": finished})
        self.done.append(finished)
        self.item = None


def responses_frames(model: str, reply: Reply, body: dict[str, Any], delay: float) -> Iterator[Frame]:
    """SSE frames of ``reply`` as Responses stream events: response.created, each output item
    added, its deltas and done, and response.completed (or .incomplete) with usage."""
    stream = _Stream(delay, body)
    response: dict[str, Any] = {
        "id": "resp_" + uuid.uuid4().hex[:16],
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    yield stream.frame("response.created", {"response": response})
    yield stream.frame("response.in_progress", {"response": response})
    for piece in reply.pieces:
        kind = _ITEM_OF[piece.kind]
        if stream.item is None or piece.kind == "tool_start" or stream.item["type"] != kind:
            # An argument piece with no call open opens a ``bash`` call, as on the other APIs.
            yield from stream.open(kind, piece.text if piece.kind == "tool_start" else "bash")
        if piece.kind != "tool_start":
            yield stream.delta(piece.text)
    if reply.finish is None:
        return
    yield from stream.close()
    input_tokens = estimate_tokens(body)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": len(reply.pieces),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + len(reply.pieces),
    }
    ended = {**response, "output": stream.done, "usage": usage}
    if reply.finish == "length":
        ended |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
        yield stream.frame("response.incomplete", {"response": ended}, True)
        return
    yield stream.frame("response.completed", {"response": ended | {"status": "completed"}}, True)
