"""Scripted fake model server so the real `pi` CLI runs offline (demo and tests).

The server speaks two wire formats, on 127.0.0.1 only:

* OpenAI chat completions: ``POST <base>/v1/chat/completions`` with ``stream: true``;
  answered with SSE ``data: {chat.completion.chunk}`` lines and ``data: [DONE]``.
* Anthropic messages: ``POST <base>/v1/messages`` (pi 1.6.0 and Claude Code add ``?beta=true``);
  answered with ``event: <name>`` / ``data: {...}`` SSE pairs; ``/v1/messages/count_tokens``
  answers an estimate.

Tool scenarios call the tools under the names and argument shapes the request offers: pi's
``bash``/``edit``/``write`` (``path``), or Claude Code's ``Bash``/``Read``/``Edit``/``Write``
(``file_path``). This module is the model server, not an agent: like a real model it reads
the tool schemas it is offered, so it is the one place outside ``bridge/agents/pi/`` and
``bridge/agents/claude/`` that knows both agents' tool names.

The requested model id names a scenario (see :data:`SCENARIOS`): what the fake model
says, whether it calls a tool, fails, drops the connection, stalls, and so on. Scenario
logic is written once in a wire-neutral form (:class:`Reply`) and rendered into either
format, so every scenario works on both APIs. :func:`write_pi_agent_dir` writes the
``models.json`` that points pi at the server.

``python -m bridge.scripted_model.server [--port N] [--agent-dir DIR]`` serves until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import pathlib
import re
import select
import signal
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final, Literal, Self

__all__ = [
    "ANTHROPIC_SIGNATURE",
    "ANTHROPIC_TEXT",
    "ANTHROPIC_THOUGHT",
    "DROP_TEXT",
    "EDIT_FILE",
    "EDIT_NEW",
    "EDIT_OLD",
    "EDIT_ORIGINAL",
    "FILE_TOOL_PREAMBLE",
    "FLOOD_CHARS",
    "FLOOD_PIECES",
    "LENGTH_TEXT",
    "SCENARIOS",
    "TEXT_REPLY",
    "THINKING_ANSWER",
    "THINKING_THOUGHT",
    "TOOL_COMMANDS",
    "TOOL_PREAMBLE",
    "UNICODE_REPLY",
    "WRITE_CONTENT",
    "WRITE_FILE",
    "ScriptedModelServer",
    "flood_piece",
    "flood_reply_text",
    "long_reply_text",
    "tool_answer_text",
    "write_pi_agent_dir",
]

log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"

#: GET path that answers the recorded requests (see ScriptedModelServer.request_summaries).
REQUESTS_PATH: Final = "/_scripted/requests"
#: Seconds between streamed pieces for ordinary scenarios, before ``delay_scale``.
CHUNK_DELAY: Final = 0.005
#: Seconds between pieces of ``slow`` (not scaled: cancel tests need a live stream).
SLOW_INTERVAL: Final = 0.3
#: Number of pieces the ``slow`` scenario streams (~30 s at :data:`SLOW_INTERVAL`).
SLOW_PIECES: Final = 100
#: Seconds ``hang`` stays silent before closing the connection (not scaled).
HANG_SECONDS: Final = 60.0
#: Number of 5-character deltas of the plain ``long`` scenario.
LONG_DEFAULT: Final = 2000
#: Upper bound for ``long-N`` so a typo cannot make the server stream for hours.
LONG_MAX: Final = 1_000_000
#: ``flood``: FLOOD_PIECES numbered deltas of FLOOD_CHARS characters (16 MB: more than every pipe
#: and high-water mark holds); ``flood-N``: N numbered deltas of FLOOD_PIECE_CHARS.
FLOOD_PIECES: Final = 16_000
FLOOD_CHARS: Final = 1000
FLOOD_PIECE_CHARS: Final = 4096
#: Upper bound for ``flood-N`` (N deltas of FLOOD_PIECE_CHARS): 1 GB of text.
FLOOD_MAX: Final = 262_144
#: How many ``flaky`` requests fail before it answers.
FLAKY_FAILURES: Final = 2

TEXT_REPLY: Final = (
    "Hello from the fake model. This reply is streamed in many small pieces so that a "
    "client can observe message_update events one delta at a time. It ends here."
)
THINKING_THOUGHT: Final = (
    "The user greets me. I should answer briefly and politely. A short friendly reply is enough."
)
THINKING_ANSWER: Final = "Hello! Thinking done, here is the answer."
ANTHROPIC_THOUGHT: Final = "Anthropic-style thinking: the user wants a greeting."
ANTHROPIC_TEXT: Final = "Hello from the fake Anthropic endpoint."
ANTHROPIC_SIGNATURE: Final = "fakesig-0123456789abcdef"
TOOL_PREAMBLE: Final = "Let me run that command."
FILE_TOOL_PREAMBLE: Final = "Let me change that file."
LENGTH_TEXT: Final = "This answer will be cut off because"
DROP_TEXT: Final = "Partial answer then the connection"
#: Streamed piece by piece; each piece stresses another way of splitting or escaping.
UNICODE_PIECES: Final[tuple[str, ...]] = (
    "Line1\u2028Line2 ",
    "para\u2029graph ",
    "nel\u0085x ",
    "tab\tand\r\nnewline ",
    "emoji \U0001f600\U0001f44d\U0001f3fd ",
    "CJK \u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f ",
    "combining e\u0301 n\u0303 a\u030a ",
    'quote " backslash \\ ',
    "done",
)
UNICODE_REPLY: Final = "".join(UNICODE_PIECES)

#: The bash command each tool scenario asks pi to run.
TOOL_COMMANDS: Final[dict[str, str]] = {
    "tool": "echo hi",
    "toolfail": "echo out; echo oops >&2; exit 3",
    "toolbig": "seq 1 100000",
    "toolslow": "sleep 30",
    "toolsteer": "sleep 2",
    # A grandchild with no environment, its own session and a double fork: only containment finds it.
    "toolescape": "(env -i setsid sh -c 'echo $$ > escaped.pid.tmp && mv escaped.pid.tmp escaped.pid"
    " && exec sleep 300' &)",
}

#: The file the ``edit`` scenario edits (relative to pi's cwd; the test creates it with
#: :data:`EDIT_ORIGINAL`) and the one replacement it asks for.
EDIT_FILE: Final = "notes.txt"
EDIT_ORIGINAL: Final = "line one\nline two\nline three\n"
EDIT_OLD: Final = "line two"
EDIT_NEW: Final = "line 2, edited"
#: The file the ``write`` scenario creates (relative to pi's cwd) and its content.
WRITE_FILE: Final = "created/new.txt"
WRITE_CONTENT: Final = "first line\nsecond line\n"

#: The call of pi's own file tools each file scenario makes: (tool name, arguments), in the
#: argument shapes of pi 1.6.0's `edit` ({path, edits: [{oldText, newText}]}) and `write`.
FILE_TOOL_CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "edit": ("edit", {"path": EDIT_FILE, "edits": [{"oldText": EDIT_OLD, "newText": EDIT_NEW}]}),
    "write": ("write", {"path": WRITE_FILE, "content": WRITE_CONTENT}),
}
#: Scenarios that call pi's file tool on the path the prompt names (whatever it is: a FIFO, a
#: device, a NUL byte), then answer slowly, like ``slow``, so the run stays live to be cancelled.
PATH_TOOL_CALLS: Final[dict[str, str]] = {"writepath": "write", "editpath": "edit"}

SCENARIOS: Final[dict[str, str]] = {
    "text": "streams a fixed English reply word by word",
    "thinking": "streams reasoning_content (thinking) first, then a short text answer",
    "thinking_anthropic": "thinking block + signature, then text (for anthropic-messages)",
    "tool": "calls bash `echo hi`, then answers with what the command printed",
    "toolfail": "calls bash with a command that writes stderr and exits 3, then answers",
    "toolbig": "calls bash `seq 1 100000` so pi truncates the output, then answers",
    "toolslow": "calls bash `sleep 30` (for cancelling mid-tool), then answers `done`",
    "toolsteer": "calls bash `sleep 2` (a window for a steer to land mid-tool), then answers",
    "edit": f"calls pi's edit on {EDIT_FILE} ({EDIT_OLD!r} -> {EDIT_NEW!r}), then answers what it said",
    "write": f"calls pi's write to create {WRITE_FILE} (2 lines), then answers what it said",
    "writepath": "calls pi's write on the path the prompt names (2 lines), then streams like `slow`",
    "editpath": f"calls pi's edit on the path the prompt names ({EDIT_OLD!r} -> {EDIT_NEW!r}), then `slow`",
    "toolescape": "calls bash with a detached, env-less `sleep 300` writing escaped.pid in the cwd",
    "unicode": 'raw U+2028/U+2029/U+0085, CR LF, emoji, CJK, combining marks, " and \\',
    "length": "streams some text, then finish_reason `length`",
    "err500": "HTTP 500 with a JSON error body, every time",
    "err429": "HTTP 429 with Retry-After: 0, every time",
    "err401": "HTTP 401 authentication error, every time",
    "flaky": "HTTP 500 for the first 2 requests (per server; reset() re-arms), then text",
    "drop": "streams a few text pieces, then closes without finish_reason or [DONE]",
    "slow": "text at ~300 ms per piece for ~30 s (for cancelling mid-stream)",
    "long": f"{LONG_DEFAULT} deltas of 5 characters each, no delay; `long-N`: N deltas",
    "long-20000": "20000 deltas of 5 characters each, no delay",
    "long-100000": "100000 deltas of 5 characters each, no delay",
    "flood": f"{FLOOD_PIECES} numbered deltas of {FLOOD_CHARS} characters (16 MB), no delay",
    "flood-8192": "8192 numbered deltas of 4 KB (32 MB), no delay, for a client that stops reading;"
    " `flood-N`: N such deltas",
    "echo": "replies `ECHO:` followed by the exact text of the last user message",
    "hang": "accepts the request, sends nothing for 60 s, then closes the connection",
}

Api = Literal["openai", "anthropic"]
FinishReason = Literal["stop", "length", "tool_calls"]
PieceKind = Literal["thinking", "text", "tool_start", "tool_args"]
ErrorKind = Literal["server", "rate_limit", "auth", "not_found", "bad_request"]


@dataclass(frozen=True)
class Piece:
    """One streamed unit: thinking or text delta, tool call opening, or tool-args fragment.

    For ``tool_start`` ``text`` is the tool name; for ``tool_args`` a raw JSON fragment.
    """

    kind: PieceKind
    text: str


@dataclass(frozen=True)
class ErrorReply:
    """A non-streamed HTTP error answer."""

    status: int
    message: str
    kind: ErrorKind
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Reply:
    """What a scenario answers, independent of the wire format.

    ``finish`` None means: stop after the pieces without any end marker and close the
    connection. ``delay`` is the pause before each piece, multiplied by the server's
    ``delay_scale`` when ``scaled``. ``hang`` > 0: send nothing, wait that long, close.
    """

    pieces: list[Piece] = field(default_factory=list)
    finish: FinishReason | None = "stop"
    delay: float = CHUNK_DELAY
    scaled: bool = True
    error: ErrorReply | None = None
    hang: float = 0.0


# ------------------------------------------------------------------------------------
# Request inspection


def _content_text(content: object, *, block_types: tuple[str, ...] = ("text",)) -> str | None:
    """Text of a message ``content`` (string or list of typed blocks), None if none."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") in block_types:
            value = block.get("text")
            if isinstance(value, str):
                texts.append(value)
    return "".join(texts) if texts else None


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, dict)]


def last_user_text_of(body: dict[str, Any]) -> str | None:
    """Text of the last user message carrying text (tool results are not user text).

    Text blocks an agent adds as context before the prompt (Claude Code's `<system-reminder>`
    blocks) are not the user's text.
    """
    for message in reversed(_messages(body)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = [
                block
                for block in content
                if not (
                    isinstance(block, dict) and str(block.get("text", "")).startswith("<system-reminder>")
                )
            ]
        text = _content_text(content)
        if text is not None:
            return text
    return None


def user_texts_of(body: dict[str, Any]) -> list[str]:
    """Texts of every user message carrying text, in order (the conversation so far)."""
    texts = []
    for message in _messages(body):
        if message.get("role") == "user":
            text = _content_text(message.get("content"))
            if text is not None:
                texts.append(text)
    return texts


def trailing_tool_result(body: dict[str, Any]) -> str | None:
    """Text of the tool result(s) the conversation ends with; None if it ends otherwise.

    OpenAI format: trailing ``role: "tool"`` messages. Anthropic format: a final user
    message holding ``tool_result`` blocks.
    """
    messages = [m for m in _messages(body) if m.get("role") not in ("system", "developer")]
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        results: list[str] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.append(_content_text(message.get("content")) or "")
        return "\n".join(reversed(results))
    content = last.get("content")
    if last.get("role") == "user" and isinstance(content, list):
        found = False
        texts: list[str] = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found = True
                texts.append(_content_text(block.get("content")) or "")
        if found:
            return "\n".join(texts)
    return None


def offered_tools(body: dict[str, Any]) -> dict[str, tuple[str, frozenset[str]]]:
    """The tools a request offers: lower-cased name -> (name as offered, its argument names)."""
    tools = body.get("tools")
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        spec: dict[str, Any] = function if isinstance(function, dict) else tool
        name = spec.get("name")
        schema = spec.get("input_schema") or spec.get("parameters") or {}
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(name, str):
            found[name.lower()] = (name, frozenset(props) if isinstance(props, dict) else frozenset())
    return found


def offered_tool(body: dict[str, Any], name: str) -> str:
    """`name` spelled as the request offers it (an agent may capitalize its tools), else as given."""
    return offered_tools(body).get(name, (name, frozenset()))[0]


def tool_results_count(body: dict[str, Any]) -> int:
    """How many tool results the conversation holds since its last user text."""
    count = 0
    for message in reversed(_messages(body)):
        content = message.get("content")
        if message.get("role") == "tool":
            count += 1
        elif message.get("role") == "user":
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                count += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
            else:
                break
    return count


def file_tool_calls(model: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The file tool calls of the `edit`/`write` scenario, in the schema the request offers.

    pi's tools take `path` (FILE_TOOL_CALLS). Tools taking `file_path`/`old_string`/`new_string`
    (Claude Code's Edit and Write) get those shapes; such an Edit refuses a file it has not read
    in the conversation, so the scenario reads it first.
    """
    tools = offered_tools(body)
    edit, write = tools.get("edit"), tools.get("write")
    if model == "edit" and edit is not None and "file_path" in edit[1]:
        read = tools.get("read", ("Read", frozenset()))[0]
        path = _cwd_path(body, EDIT_FILE)
        edit_args = {"file_path": path, "old_string": EDIT_OLD, "new_string": EDIT_NEW}
        return [(read, {"file_path": path}), (edit[0], edit_args)]
    if model == "write" and write is not None and "file_path" in write[1]:
        return [(write[0], {"file_path": _cwd_path(body, WRITE_FILE), "content": WRITE_CONTENT})]
    return [FILE_TOOL_CALLS[model]]


_CWD_LINE: Final = re.compile(r"working directory: (/[^\n]*)", re.IGNORECASE)


def _cwd_path(body: dict[str, Any], relative: str) -> str:
    """`relative` under the working directory the request's system prompt names (else relative)."""
    system = body.get("system")
    text = _json(system) if not isinstance(system, str) else system
    match = _CWD_LINE.search(text.replace("\\n", "\n"))
    return f"{match.group(1).strip()}/{relative}" if match else relative


# ------------------------------------------------------------------------------------
# Scenario scripts


def _words(text: str) -> list[str]:
    """Split ``text`` after each space, keeping the spaces (as in the captures)."""
    parts = text.split(" ")
    pieces = [p + " " for p in parts[:-1]] + [parts[-1]]
    return [p for p in pieces if p]


def _text_pieces(text: str, kind: PieceKind = "text") -> list[Piece]:
    return [Piece(kind, w) for w in _words(text)]


def _fixed_chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def long_reply_text(count: int) -> str:
    """The text ``long``/``long-N`` streams, as ``count`` 5-character deltas."""
    return "".join(_long_piece(i) for i in range(count))


def _long_piece(i: int) -> str:
    return f"w{i % 1000:03d} "


def flood_piece(i: int, size: int = FLOOD_CHARS) -> str:
    """Delta `i` of ``flood`` (``flood-N``: of FLOOD_PIECE_CHARS): numbered, so a loss or a
    reordering shows."""
    return f"{i:07d}" + "." * (size - 8) + " "


def flood_reply_text(count: int) -> str:
    """The text ``flood-N`` streams, as ``count`` deltas of FLOOD_PIECE_CHARS characters."""
    return "".join(flood_piece(i, FLOOD_PIECE_CHARS) for i in range(count))


def tool_answer_text(model: str, tool_output: str) -> str:
    """The answer a tool scenario gives once the request carries the tool's result."""
    if model == "toolslow":
        return "done"
    output = tool_output.strip()
    if len(output) > 200:
        # Keep the answer short: toolbig is about pi's truncation, not echoing it all.
        output = "\n".join(output.splitlines()[:3]) + "\n ... " + output[-40:]
    return f"The command printed: {output}. Done."


def _tool_call_pieces(name: str, arguments: dict[str, Any]) -> list[Piece]:
    encoded = json.dumps(arguments)
    # 6-character fragments, like the captures: pi must reassemble partial JSON.
    return [Piece("tool_start", name)] + [Piece("tool_args", frag) for frag in _fixed_chunks(encoded, 6)]


def _long_count(model: str) -> int | None:
    if model == "long":
        return LONG_DEFAULT
    match = re.fullmatch(r"long-(\d{1,7})", model)
    if match is None:
        return None
    count = int(match.group(1))
    return count if 0 < count <= LONG_MAX else None


def _slow_reply() -> Reply:
    words = _words(TEXT_REPLY)
    words[-1] += " "
    pieces = [Piece("text", words[i % len(words)]) for i in range(SLOW_PIECES)]
    return Reply(pieces, delay=SLOW_INTERVAL, scaled=False)


def _flood_count(model: str) -> int | None:
    match = re.fullmatch(r"flood-(\d{1,6})", model)
    if match is None:
        return None
    count = int(match.group(1))
    return count if 0 < count <= FLOOD_MAX else None


def _error(status: int, message: str, kind: ErrorKind, *headers: tuple[str, str]) -> Reply:
    return Reply(error=ErrorReply(status, message, kind, tuple(headers)))


def build_reply(model: str, body: dict[str, Any], flaky_attempt: int) -> Reply:
    """The scripted answer of scenario ``model`` to a request with ``body``.

    ``flaky_attempt`` is the 1-based number of this request among the server's ``flaky``
    requests (ignored for other models).
    """
    if model == "text":
        return Reply(_text_pieces(TEXT_REPLY))
    if model == "thinking":
        return Reply(_text_pieces(THINKING_THOUGHT, "thinking") + _text_pieces(THINKING_ANSWER))
    if model == "thinking_anthropic":
        return Reply(_text_pieces(ANTHROPIC_THOUGHT, "thinking") + _text_pieces(ANTHROPIC_TEXT))
    if model in TOOL_COMMANDS:
        result = trailing_tool_result(body)
        if result is None:
            bash = offered_tool(body, "bash")
            return Reply(
                _text_pieces(TOOL_PREAMBLE) + _tool_call_pieces(bash, {"command": TOOL_COMMANDS[model]}),
                "tool_calls",
            )
        return Reply(_text_pieces(tool_answer_text(model, result)))
    if model in FILE_TOOL_CALLS:
        result = trailing_tool_result(body)
        calls = file_tool_calls(model, body)
        done = tool_results_count(body)
        if done < len(calls):
            name, arguments = calls[done]
            preamble = _text_pieces(FILE_TOOL_PREAMBLE) if done == 0 else []
            return Reply(preamble + _tool_call_pieces(name, arguments), "tool_calls")
        return Reply(_text_pieces(f"The tool said: {(result or '').strip()} Done."))
    if model in PATH_TOOL_CALLS:
        if tool_results_count(body) == 0:
            tool = PATH_TOOL_CALLS[model]
            name, arguments = FILE_TOOL_CALLS[tool]
            call = {**arguments, "path": last_user_text_of(body) or ""}
            pieces = _text_pieces(FILE_TOOL_PREAMBLE) + _tool_call_pieces(offered_tool(body, name), call)
            return Reply(pieces, "tool_calls")
        return _slow_reply()
    if model == "unicode":
        return Reply([Piece("text", p) for p in UNICODE_PIECES])
    if model == "length":
        return Reply(_text_pieces(LENGTH_TEXT), "length")
    if model == "err500":
        return _error(500, "fake internal server error", "server")
    if model == "err429":
        return _error(429, "fake rate limit exceeded", "rate_limit", ("Retry-After", "0"))
    if model == "err401":
        return _error(401, "fake invalid API key", "auth")
    if model == "flaky":
        if flaky_attempt <= FLAKY_FAILURES:
            return _error(500, f"fake flaky failure {flaky_attempt}/{FLAKY_FAILURES}", "server")
        return Reply(_text_pieces(TEXT_REPLY))
    if model == "drop":
        return Reply(_text_pieces(DROP_TEXT), None)
    if model == "slow":
        return _slow_reply()
    if model == "echo":
        text = "ECHO:" + (last_user_text_of(body) or "")
        return Reply([Piece("text", c) for c in _fixed_chunks(text, 16)])
    if model == "hang":
        return Reply(hang=HANG_SECONDS)
    if model == "flood":
        return Reply([Piece("text", flood_piece(i)) for i in range(FLOOD_PIECES)], delay=0.0)
    count = _long_count(model)
    if count is not None:
        return Reply([Piece("text", _long_piece(i)) for i in range(count)], delay=0.0)
    count = _flood_count(model)
    if count is not None:
        return Reply([Piece("text", flood_piece(i, FLOOD_PIECE_CHARS)) for i in range(count)], delay=0.0)
    return _error(404, f"model {model} not found", "not_found")


# ------------------------------------------------------------------------------------
# Wire formats


def _json(obj: object) -> str:
    # Raw (non-ASCII-escaped) text on the wire, like real providers: U+2028 etc. must
    # survive the client's SSE and JSON parsing.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _estimate_tokens(body: dict[str, Any]) -> int:
    return max(1, len(_json(_messages(body))) // 4)


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
        return f"data: {_json(obj)}\n\n".encode()

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
    prompt_tokens = _estimate_tokens(body)
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
    yield Frame(f"data: {_json(final)}\n\n".encode(), 0.0)
    yield Frame(b"data: [DONE]\n\n", 0.0)


_ANTHROPIC_STOP: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
}


def anthropic_frames(model: str, reply: Reply, body: dict[str, Any], delay: float) -> Iterator[Frame]:
    """SSE frames of ``reply`` as Anthropic Messages stream events."""

    def event(name: str, obj: dict[str, Any], pause: float = 0.0) -> Frame:
        return Frame(f"event: {name}\ndata: {_json({'type': name, **obj})}\n\n".encode(), pause)

    input_tokens = _estimate_tokens(body)
    message: dict[str, Any] = {
        "id": "msg_" + uuid.uuid4().hex[:12],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    yield event("message_start", {"message": message})
    yield event("ping", {})
    index = -1
    open_kind: str | None = None

    def close_block() -> Iterator[Frame]:
        if open_kind == "thinking":
            # Real Anthropic sends the signature as the last delta of a thinking block.
            sig = {"type": "signature_delta", "signature": ANTHROPIC_SIGNATURE}
            yield event("content_block_delta", {"index": index, "delta": sig})
        if open_kind is not None:
            yield event("content_block_stop", {"index": index})

    for piece in reply.pieces:
        wanted = "tool" if piece.kind in ("tool_start", "tool_args") else piece.kind
        if piece.kind == "tool_start" or wanted != open_kind:
            yield from close_block()
            index += 1
            open_kind = wanted
            if piece.kind == "thinking":
                block: dict[str, Any] = {
                    "type": "thinking",
                    "thinking": "",
                    "signature": "",
                }
            elif piece.kind == "text":
                block = {"type": "text", "text": ""}
            else:
                name = piece.text if piece.kind == "tool_start" else "bash"
                block = {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:12],
                    "name": name,
                    "input": {},
                }
            yield event("content_block_start", {"index": index, "content_block": block}, delay)
            if piece.kind == "tool_start":
                continue
        if piece.kind == "thinking":
            delta: dict[str, Any] = {"type": "thinking_delta", "thinking": piece.text}
        elif piece.kind == "text":
            delta = {"type": "text_delta", "text": piece.text}
        else:
            delta = {"type": "input_json_delta", "partial_json": piece.text}
        yield event("content_block_delta", {"index": index, "delta": delta}, delay)
    if reply.finish is None:
        return
    yield from close_block()
    stop = {"stop_reason": _ANTHROPIC_STOP[reply.finish], "stop_sequence": None}
    usage = {"output_tokens": len(reply.pieces)}
    yield event("message_delta", {"delta": stop, "usage": usage}, delay)
    yield event("message_stop", {})


# ------------------------------------------------------------------------------------
# HTTP server


class _Disconnected(Exception):
    """The client went away or the server is stopping: abandon this response quietly."""


_QUIET_ERRORS: Final = (
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    TimeoutError,
)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 makes simultaneous connects wait for SYN retries (~1 s).
    request_queue_size = 256

    def __init__(self, owner: ScriptedModelServer, address: tuple[str, int]) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(): reverse DNS, which can stall.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, _QUIET_ERRORS) or self.owner.stopping:
            log.debug("connection from %s ended: %r", client_address, exc)
            return
        log.exception("error while serving %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModel/1.0"
    sys_version = ""

    # -- plumbing ---------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._track(self.connection, add=False)

    def handle(self) -> None:
        try:
            super().handle()
        except (_Disconnected, *_QUIET_ERRORS):
            self.close_connection = True
        except OSError:
            if not self.server.owner.stopping:
                raise
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> None:
        payload = _json(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        # Every answer closes its connection: no keep-alive races with client pools.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        self.close_connection = True

    def _client_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; True if the peer closed its side meanwhile."""
        try:
            # poll, not select: select() fails on descriptors above 1023.
            poller = select.poll()
            poller.register(self.connection, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(timeout * 1000):
                return False
            peeked = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True
        if peeked == b"":
            return True
        # The client sent more bytes (not expected mid-response); avoid a busy loop.
        time.sleep(timeout)
        return False

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``; raise _Disconnected as soon as the client or server goes."""
        owner = self.server.owner
        deadline = time.monotonic() + seconds
        while True:
            if owner.stopping:
                raise _Disconnected
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._client_gone(min(remaining, 0.05)):
                raise _Disconnected

    # -- requests ---------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == REQUESTS_PATH:
            self._send_json(200, {"requests": self.server.owner.request_summaries()})
            return
        self.server.owner._record(self.path, None, {})
        if path.endswith("/models"):
            models = sorted(SCENARIOS)
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in models]
            self._send_json(200, {"object": "list", "data": data})
            return
        self._send_json(
            404,
            {
                "error": {
                    "message": f"unknown path {self.path}",
                    "type": "invalid_request_error",
                }
            },
        )

    def do_POST(self) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0].rstrip("/")
        api: Api
        if path.endswith("/messages/count_tokens"):
            counted = self._read_body()
            try:
                request = json.loads(counted.decode("utf-8")) if counted else {}
            except (UnicodeDecodeError, json.JSONDecodeError):
                request = {}
            request = request if isinstance(request, dict) else {}
            owner._record(self.path, None, {})
            self._send_json(200, {"input_tokens": _estimate_tokens(request)})
            return
        if path.endswith("/chat/completions"):
            api = "openai"
        elif path.endswith("/messages"):
            api = "anthropic"
        else:
            self._read_body()
            owner._record(self.path, None, {})
            bad = ErrorReply(404, f"unknown path {self.path}", "not_found")
            self._send_json(404, error_body("openai", bad))
            return
        raw = self._read_body()
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            parsed = None
            problem = f"request body is not JSON: {exc}"
        else:
            problem = "request body must be a JSON object"
        if not isinstance(parsed, dict):
            owner._record(self.path, None, {})
            self._send_json(400, error_body(api, ErrorReply(400, problem, "bad_request")))
            return
        body: dict[str, Any] = parsed
        raw_model = body.get("model")
        model = raw_model if isinstance(raw_model, str) else ""
        flaky_attempt = owner._record(self.path, model, body)
        reply = build_reply(model, body, flaky_attempt)
        if reply.error is not None:
            self._send_json(reply.error.status, error_body(api, reply.error), reply.error.headers)
            return
        if reply.hang > 0:
            self._pause(reply.hang)
            self.close_connection = True
            return
        delay = reply.delay * (owner.delay_scale if reply.scaled else 1.0)
        if api == "openai":
            frames = openai_frames(model, reply, body, delay)
        else:
            frames = anthropic_frames(model, reply, body, delay)
        self._stream(frames)

    def _stream(self, frames: Iterator[Frame]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        # No Content-Length: the body ends when the connection closes, which also lets
        # `drop` end the stream mid-way.
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        owner = self.server.owner
        pending = bytearray()
        for n, frame in enumerate(frames):
            if frame.pause > 0:
                if pending:
                    self.wfile.write(bytes(pending))
                    pending.clear()
                self._pause(frame.pause)
                self.wfile.write(frame.data)
                continue
            # Zero-delay frames are batched: a syscall per frame is slow for long-100000.
            pending += frame.data
            if len(pending) >= 65536:
                self.wfile.write(bytes(pending))
                pending.clear()
            if n % 256 == 0 and owner.stopping:
                raise _Disconnected
        if pending:
            self.wfile.write(bytes(pending))


class ScriptedModelServer:
    """Context manager; serves in a background thread on 127.0.0.1:port (0 = pick free).

    ``delay_scale`` multiplies the small per-piece delays (0 = as fast as possible); the
    ``slow`` and ``hang`` scenarios keep their real-time durations. ``record_path``: also append
    every recorded request to this file as one JSON line, for clients in another process (the
    editor tests) that cannot read :attr:`requests`.
    """

    def __init__(
        self,
        host: str = LOOPBACK,
        port: int = 0,
        *,
        delay_scale: float = 1.0,
        record_path: pathlib.Path | None = None,
    ) -> None:
        if host != LOOPBACK:
            raise ValueError(f"ScriptedModelServer only binds {LOOPBACK}, not {host!r}")
        if delay_scale < 0:
            raise ValueError("delay_scale must be >= 0")
        self._host = host
        self._port = port
        self.delay_scale = delay_scale
        self._record_path = record_path
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._counts: dict[str, int] = {}
        self._flaky = 0
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and start serving in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer(self, (self._host, self._port))
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model:{self._port}",
            daemon=True,
        )
        self._thread.start()
        log.info("scripted model server listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stop serving and cut in-flight streams; returns promptly."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            # Wakes handler threads blocked in select/recv/send so they end now.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the requested one until start())."""
        return self._port

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self._port}/v1"

    @property
    def stopping(self) -> bool:
        """True once stop() began."""
        return self._stopping.is_set()

    @property
    def open_connections(self) -> int:
        """Number of client connections open now (a cancelled stream drops out)."""
        with self._lock:
            return len(self._connections)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request received, oldest first: path, model, body, n (per model), t."""
        with self._lock:
            return list(self._requests)

    def request_summaries(self) -> list[dict[str, Any]]:
        """Every model request so far as {model, n, userTexts}: what GET /_scripted/requests
        answers, so a test in another process (an editor's) can see what reached the model."""
        return [
            {"model": r["model"], "n": r["n"], "userTexts": user_texts_of(r["body"])}
            for r in self.requests
            if r["model"]
        ]

    def last_user_text(self, model: str | None = None) -> str | None:
        """Text of the last user message of the latest request (of ``model`` if given)."""
        with self._lock:
            candidates = [r for r in self._requests if r["body"] and (model is None or r["model"] == model)]
        if not candidates:
            return None
        return last_user_text_of(candidates[-1]["body"])

    def reset(self) -> None:
        """Forget recorded requests and per-model counters, flaky counter included."""
        with self._lock:
            self._requests.clear()
            self._counts.clear()
            self._flaky = 0

    # -- called by handler threads ----------------------------------------------------

    def _record(self, path: str, model: str | None, body: dict[str, Any]) -> int:
        """Record one request; returns the flaky attempt number (0 for other models)."""
        with self._lock:
            key = model or ""
            n = self._counts.get(key, 0) + 1
            self._counts[key] = n
            entry = {"path": path, "model": model, "body": body, "n": n, "t": time.time()}
            self._requests.append(entry)
            if self._record_path is not None:
                with self._record_path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(entry, ensure_ascii=False) + "\n")
            if model == "flaky":
                self._flaky += 1
                return self._flaky
            return 0

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


# ------------------------------------------------------------------------------------
# pi configuration


def _anthropic_base(base_url: str) -> str:
    # pi's anthropic-messages client appends /v1/messages itself.
    base = base_url.rstrip("/")
    return base.removesuffix("/v1")


def write_pi_agent_dir(
    agent_dir: pathlib.Path,
    base_url: str,
    *,
    provider: str = "fake",
    disable_pi_retry: bool = False,
) -> None:
    """Write models.json (provider `provider` with every scenario in SCENARIOS as a
    model id taking text and images, api openai-completions, apiKey "x", compat {supportsDeveloperRole:false,
    supportsReasoningEffort:false}), plus an `anthropic` style provider named
    f"{provider}-anthropic" (api "anthropic-messages", baseUrl without /v1: the
    Anthropic client adds it) for the thinking_anthropic scenario, and when disable_pi_retry is true a
    settings.json {"retry":{"enabled":false,"provider":{"maxRetries":0}}}. Create the
    dir if missing.

    The anthropic provider lists every scenario too (the server renders each one in both
    formats); its ``thinking_anthropic`` model is marked ``reasoning: true`` so pi asks for
    thinking the way it would from a real Claude model.
    """
    agent_dir = pathlib.Path(agent_dir)
    agent_dir.mkdir(parents=True, exist_ok=True)
    # Every model takes images, so pi hands a prompt's images on and tests see them arrive.
    both: list[str] = ["text", "image"]
    openai_models = [{"id": model, "input": both} for model in SCENARIOS]
    anthropic_models: list[dict[str, Any]] = [
        {"id": model, "input": both, "reasoning": True}
        if model == "thinking_anthropic"
        else {"id": model, "input": both}
        for model in SCENARIOS
    ]
    config = {
        "providers": {
            provider: {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": "x",
                "compat": {
                    "supportsDeveloperRole": False,
                    "supportsReasoningEffort": False,
                },
                "models": openai_models,
            },
            f"{provider}-anthropic": {
                "baseUrl": _anthropic_base(base_url),
                "api": "anthropic-messages",
                "apiKey": "x",
                "models": anthropic_models,
            },
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if disable_pi_retry:
        settings = {"retry": {"enabled": False, "provider": {"maxRetries": 0}}}
        (agent_dir / "settings.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; print one JSON line (baseUrl, port) at start."""
    parser = argparse.ArgumentParser(
        prog="python -m bridge.scripted_model.server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    parser.add_argument(
        "--agent-dir",
        type=pathlib.Path,
        help="also write a pi agent dir (models.json) here",
    )
    parser.add_argument(
        "--provider",
        default="fake",
        help="provider name in models.json (default: fake)",
    )
    parser.add_argument(
        "--disable-pi-retry",
        action="store_true",
        help="write settings.json turning pi retries off",
    )
    parser.add_argument(
        "--delay-scale",
        type=float,
        default=1.0,
        help="multiply per-piece delays (default 1)",
    )
    parser.add_argument(
        "--record",
        type=pathlib.Path,
        help="append every request (path, model, body, n, t) to this file as a JSON line",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with ScriptedModelServer(port=args.port, delay_scale=args.delay_scale, record_path=args.record) as server:
        if args.agent_dir is not None:
            write_pi_agent_dir(
                args.agent_dir,
                server.base_url,
                provider=args.provider,
                disable_pi_retry=args.disable_pi_retry,
            )
            log.info("wrote pi agent dir %s", args.agent_dir)
        sys.stdout.write(_json({"baseUrl": server.base_url, "port": server.port}) + "\n")
        sys.stdout.flush()
        while not done.wait(0.5):
            pass
        log.info("stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
