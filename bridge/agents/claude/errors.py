"""Classify Claude Code's failures into contract error kinds, and decide which are worth retrying."""

from __future__ import annotations

import re
from typing import Final

from bridge.agents.model_errors import RETRYABLE_KINDS, classify_model_error
from bridge.contract import ErrorKind

_API_ERROR: Final = re.compile(r"^\s*API Error:\s*", re.IGNORECASE)
_USAGE_WORDS: Final = ("unknown option", "error: option", "invalid value", "argument", "allowed choices")


def classify_result_error(status: int | None, message: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for a `result` with `is_error: true`."""
    text = _API_ERROR.sub("", message)
    if status is not None:
        text = f"{status} {text}"
    kind, retryable = classify_model_error(text)
    return kind, retryable


def classify_subtype(subtype: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for a failed `result` subtype without an API status."""
    if subtype == "error_max_turns":
        return "model", False
    return "process", True


def classify_exit(exit_code: int | None, stderr: str) -> tuple[ErrorKind, bool]:
    """Return (kind, retryable) for a Claude Code that ended without a `result` line."""
    lowered = stderr.lower()
    if "no conversation found" in lowered or ("session" in lowered and "not found" in lowered):
        return "session", False
    # --session-id of a session that exists already: starting it again cannot help
    if "session id" in lowered and "already in use" in lowered:
        return "session", False
    if exit_code == 1 and any(word in lowered for word in _USAGE_WORDS):
        return "usage", False
    if exit_code == 1 and ("api key" in lowered or "login" in lowered or "auth" in lowered):
        return "auth", False
    if exit_code == 1 and "root" in lowered and "permission" in lowered:
        return "usage", False
    return "process", "process" in RETRYABLE_KINDS
