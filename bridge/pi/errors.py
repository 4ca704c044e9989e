"""Classify pi's error texts into contract error kinds, and decide which are worth retrying.

pi reports a failed model request only as an assistant message with stopReason "error" and an
`errorMessage` such as "500 fake internal server error", "429 ...", "Connection error." or
"401 ...". Its exit code stays 0, so this text is all the bridge has to go on.
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
_USAGE_WORDS: Final = ("unknown option", "unknown provider", "unknown flag", "invalid value")

RETRYABLE_KINDS: Final[frozenset[str]] = frozenset(
    {"rate_limit", "server", "network", "process", "agent_retry", "stalled"}
)


def classify_model_error(message: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for an `errorMessage` pi attached to a failed model request."""
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


def classify_exit(exit_code: int | None, signal_name: str | None, stderr: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for a pi that ended without a terminal event.

    Exit 1 with something on stderr and no events is pi rejecting its arguments (unknown flag,
    unknown provider or model): retrying cannot help. A crash or a kill might not recur.
    """
    lowered = stderr.lower()
    if "session found in different project" in lowered or "no session found" in lowered:
        return "session", False
    if exit_code == 1 and any(word in lowered for word in _USAGE_WORDS):
        return "usage", False
    if exit_code == 1 and ("api key" in lowered or "no models" in lowered or "auth" in lowered):
        return "auth", False
    if exit_code == 1 and "model" in lowered and "not found" in lowered:
        return "model_not_found", False
    return "process", True
