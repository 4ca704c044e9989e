"""Classify pi's error texts into contract error kinds, and decide which are worth retrying."""

from __future__ import annotations

import re
from typing import Final

from bridge.agents.model_errors import RETRYABLE_KINDS, classify_model_error
from bridge.contract import ErrorKind

__all__ = ["RETRYABLE_KINDS", "classify_exit", "classify_model_error", "classify_refusal", "lacks_rpc_mode"]

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


# What pi answers a prompt with when no model can run: no key for the model, or no model at all
# (pi 1.6: "No API key found for the selected model. Use /login ...", "No model selected").
_NO_PROVIDER: Final = re.compile(r"no api key|no model|/login|not logged in|no credentials")


def classify_refusal(command: str, reason: str) -> ErrorKind | None:
    """The contract kind of a command pi refused, where its words say one: a prompt refused for
    want of a key or a model is `auth` (the user must set a provider up; retrying cannot help)."""
    if command == "prompt" and _NO_PROVIDER.search(reason.lower()):
        return "auth"
    return None


def lacks_rpc_mode(stderr: str) -> bool:
    """Whether pi's stderr says that it has no `--mode rpc` (not that this one start failed)."""
    return _NO_RPC_MODE.search(stderr.lower()) is not None
