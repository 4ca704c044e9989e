"""Classify a failed model request, from its HTTP status and error text, into a contract error
kind, and decide which kinds are worth retrying. Agent-neutral: every agent CLI reports a provider's
failure as a status and a message in its own wrapping, which its package unwraps first.
"""

from __future__ import annotations

import re
from typing import Final

from bridge.contract import ErrorKind

_STATUS = re.compile(r"^\s*(?:status\s*)?(\d{3})\b")
_NETWORK_WORDS: Final = (
    "connection error",
    "econnrefused",
    "econnreset",
    "etimedout",
    "enotfound",
    "eai_again",
    "socket hang up",
    "network",
    "fetch failed",
    "terminated",
    "timed out",
    "timeout",
    "stream ended",
    "premature close",
)
_AUTH_WORDS: Final = (
    "api key",
    "apikey",
    "unauthorized",
    "authentication",
    "invalid x-api-key",
    "permission denied",
    "no credentials",
)
_NOT_FOUND_WORDS: Final = ("model not found", "unknown model", "not found", "does not exist")

RETRYABLE_KINDS: Final[frozenset[str]] = frozenset(
    {"rate_limit", "server", "network", "process", "agent_retry", "stalled"}
)


def classify_model_error(message: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for a model request's error text, led by its HTTP status if known."""
    lowered = message.lower()
    match = _STATUS.match(message)
    status = int(match.group(1)) if match else None
    kind: ErrorKind
    if status == 429 or "rate limit" in lowered or "too many requests" in lowered:
        kind = "rate_limit"
    elif status in (401, 403) or any(word in lowered for word in _AUTH_WORDS):
        kind = "auth"
    elif status == 404 or any(word in lowered for word in _NOT_FOUND_WORDS):
        kind = "model_not_found"
    elif status is not None and 500 <= status <= 599:
        kind = "server"
    elif status is not None and 400 <= status <= 499:
        kind = "usage"
    elif any(word in lowered for word in _NETWORK_WORDS):
        kind = "network"
    elif "overloaded" in lowered or "internal server error" in lowered:
        kind = "server"
    else:
        kind = "model"
    return kind, kind in RETRYABLE_KINDS
