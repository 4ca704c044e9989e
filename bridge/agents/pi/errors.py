"""Classify pi's error texts into contract error kinds, and decide which are worth retrying.

pi reports a failed model request only as an assistant message with stopReason "error" and an
`errorMessage` such as "500 fake internal server error", "429 ...", "Connection error." or
"401 ...". Its exit code stays 0, so this text is all the bridge has to go on; its status and
words are read by the agent-neutral classifier (bridge/agents/model_errors.py).
"""

from __future__ import annotations

import re
from typing import Final

from bridge.agents.model_errors import RETRYABLE_KINDS, classify_model_error
from bridge.contract import ErrorKind

__all__ = ["RETRYABLE_KINDS", "classify_exit", "classify_model_error", "lacks_rpc_mode"]

_USAGE_WORDS: Final = ("unknown option", "unknown provider", "unknown flag", "invalid value")
# What a pi without `--mode rpc` says when asked for it (pi 1.6: `Invalid mode "x". Valid values: ...`).
_NO_RPC_MODE: Final = re.compile(
    r"(invalid|unknown|unsupported) (mode|value for --mode)|unknown option.*--mode"
)


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


def lacks_rpc_mode(stderr: str) -> bool:
    """Whether pi's stderr says that it has no `--mode rpc` (not that this one start failed)."""
    return _NO_RPC_MODE.search(stderr.lower()) is not None
