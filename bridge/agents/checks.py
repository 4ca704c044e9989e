"""What an agent's `pi-bridge doctor` checks are made of: a check line, a probe, a PATH lookup."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

PROBE_TIMEOUT_SECONDS = 30

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass
class Check:
    """One line of the report: what was checked, how it went, and the fix when it did not."""

    name: str
    label: str
    status: Status
    summary: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Probe:
    code: int | None
    output: str


def run_probe(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> _Probe:
    """Run argv without a shell; its exit code (None: could not start) and stdout+stderr."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _Probe(None, str(exc))
    return _Probe(done.returncode, (done.stdout + "\n" + done.stderr).strip())


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def which(name: str, environ: Mapping[str, str]) -> str | None:
    """Where `name` resolves on environ's PATH, as a spawn from the bridge would find it."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) and not os.path.isdir(name) else None
    return shutil.which(name, path=environ.get("PATH", os.defpath))
