"""What a scenario answers, independent of the wire format: pieces, an end, or an HTTP error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final, Literal

#: Seconds between streamed pieces for ordinary scenarios, before ``delay_scale``.
CHUNK_DELAY: Final = 0.005

Api = Literal["openai", "anthropic", "responses", "gemini"]
FinishReason = Literal["stop", "length", "tool_calls"]
PieceKind = Literal["thinking", "text", "tool_start", "tool_args"]
ErrorKind = Literal["server", "rate_limit", "auth", "not_found", "bad_request"]


def wire_json(obj: object) -> str:
    """Compact JSON with raw (not ASCII-escaped) text."""
    # Raw (non-ASCII-escaped) text on the wire, like real providers: U+2028 etc. must
    # survive the client's SSE and JSON parsing.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


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
