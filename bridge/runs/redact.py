"""Keep secrets handed to the agent (API keys, tokens) out of error messages and diagnostics.

The bridge passes its environment and `initializationOptions.env` to pi, so a key can show up in
what pi prints on stderr or in a provider's error text. Every error the bridge reports goes
through `Redactor.error` first, and every log line through `RedactingFormatter`: a log line can
carry what an agent printed, and masking the whole line (its traceback too) leaves no call site
to forget.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Final

_SECRET_NAME: Final = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH)", re.IGNORECASE)
_MIN_SECRET_LENGTH: Final = 8
MASK: Final = "[redacted]"


class Redactor:
    """Replaces the values of secret-looking environment variables with a mask.

    The pattern is built on first use: every run gets a redactor, few ever report an error.
    """

    def __init__(self, *envs: Mapping[str, str]) -> None:
        self._envs = envs or (os.environ,)
        self._built = False
        self._compiled: re.Pattern[str] | None = None

    @property
    def _pattern(self) -> re.Pattern[str] | None:
        if not self._built:
            values: set[str] = set()
            for env in self._envs:
                for name, value in env.items():
                    if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET_LENGTH:
                        values.add(value)
            # Longest first, so a secret that contains another is masked whole.
            ordered = sorted(values, key=len, reverse=True)
            self._compiled = re.compile("|".join(map(re.escape, ordered))) if ordered else None
            self._built = True
        return self._compiled

    def text(self, value: str) -> str:
        """The text with every secret masked."""
        return self._pattern.sub(MASK, value) if self._pattern is not None else value

    def error(self, error: dict[str, Any]) -> dict[str, Any]:
        """A wire ErrorInfo dict with its message, stderr and sample lines masked."""
        if self._pattern is None:
            return error
        masked = dict(error)
        for key in ("message", "stderr"):
            if isinstance(masked.get(key), str):
                masked[key] = self.text(masked[key])
        lines = masked.get("invalidOutputLines")
        if isinstance(lines, list):
            masked["invalidOutputLines"] = [self.text(line) for line in lines]
        return masked


class RedactingFormatter(logging.Formatter):
    """A log formatter that masks the secrets of the bridge's environment, and of every
    environment handed on with `mask_in_logs`, in each whole formatted line."""

    _envs: ClassVar[list[Mapping[str, str]]] = [os.environ]
    _redactor: ClassVar[Redactor | None] = None

    def format(self, record: logging.LogRecord) -> str:
        redactor = RedactingFormatter._redactor
        if redactor is None:
            redactor = RedactingFormatter._redactor = Redactor(*RedactingFormatter._envs)
        return redactor.text(super().format(record))


def secrets_env(values: list[str]) -> dict[str, str]:
    """Values that are secrets whatever they are called (an MCP server's env values and headers),
    as an environment whose every name says secret, for `Redactor` and `mask_in_logs`."""
    return {f"PI_BRIDGE_SECRET_{i}": value for i, value in enumerate(values)}


def mask_in_logs(env: Mapping[str, str]) -> None:
    """Mask this environment's secret-looking values in every later log line too (the agents'
    environment from initializationOptions.env, which os.environ does not hold)."""
    if env and env not in RedactingFormatter._envs:
        RedactingFormatter._envs.append(dict(env))
        RedactingFormatter._redactor = None
