"""`pi-bridge doctor --agent claude`: Claude Code's CLI, its version, its native binary, its keys."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bridge.agents.checks import Check, last_line, run_probe, which

INSTALL_COMMAND: Final = "npm install -g @anthropic-ai/claude-code"
#: The oldest Claude Code the bridge is tested with.
MIN_VERSION: Final = (2, 1, 197)
#: What Claude Code reads for its credentials and endpoint (named in the report, never shown).
KEY_VARIABLES: Final = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
ENDPOINT_VARIABLES: Final = ("ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR")
_ELF: Final = b"\x7fELF"


def checks(
    command: tuple[str, ...], source: str, environ: Mapping[str, str], scripted_model: bool
) -> list[Check]:
    """Claude Code's checks in order; the binary check is skipped without a CLI."""
    cli = check_cli(command, source, environ)
    found = [cli]
    if "path" in cli.data:
        found.append(check_native_binary(cli.data["path"]))
    else:
        found.append(Check("claudeBinary", "native binary", "skip", "skipped: needs the CLI"))
    found.append(check_keys(environ, scripted_model))
    return found


def _version(text: str) -> tuple[int, ...] | None:
    head = text.split(maxsplit=1)[0] if text.split() else ""
    parts = head.split(".")
    return tuple(int(part) for part in parts) if len(parts) == 3 and all(p.isdigit() for p in parts) else None


def check_cli(command: tuple[str, ...], source: str, environ: Mapping[str, str]) -> Check:
    """Claude Code is where the server would look for it, starts, and is at least the tested version."""
    data: dict[str, Any] = {"command": list(command), "source": source, "installCommand": INSTALL_COMMAND}
    exe = which(command[0], environ) if command else None
    if exe is None:
        missing = command[0] if command else "(empty command)"
        return Check(
            "claude", "Claude Code", "fail", f"{missing} not found ({source})", INSTALL_COMMAND, data
        )
    data["path"] = exe
    env = {**environ, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    probe = run_probe([exe, *command[1:], "--version"], env, tempfile.gettempdir())
    version = _version(last_line(probe.output)) if probe.code == 0 else None
    if version is None:
        summary = f"`{' '.join(command)} --version` failed (exit {probe.code}): {last_line(probe.output)}"
        return Check("claude", "Claude Code", "fail", summary, f"reinstall it: {INSTALL_COMMAND}", data)
    shown = ".".join(str(part) for part in version)
    data["version"] = shown
    if version < MIN_VERSION:
        oldest = ".".join(str(part) for part in MIN_VERSION)
        summary = f"{shown} ({exe}) is older than {oldest}, the oldest Claude Code the bridge is tested with"
        return Check("claude", "Claude Code", "fail", summary, f"{INSTALL_COMMAND}@latest", data)
    return Check("claude", "Claude Code", "ok", f"{shown} ({exe}, from {source})", data=data)


def check_native_binary(path: str) -> Check:
    """The command resolves to Claude Code's native binary (not a wrapper left without it)."""
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as handle:
            native = handle.read(4) == _ELF
    except OSError as exc:
        return Check(
            "claudeBinary", "native binary", "fail", f"{real} cannot be read: {exc}", INSTALL_COMMAND
        )
    data = {"path": real, "native": native}
    if native:
        return Check("claudeBinary", "native binary", "ok", real, data=data)
    platform = Path(real).parent / "node_modules" / "@anthropic-ai"
    summary = f"{real} is not the native binary (a wrapper: its platform package may be missing)"
    fix = f"reinstall with optional dependencies: {INSTALL_COMMAND} (looked near {platform})"
    return Check("claudeBinary", "native binary", "warn", summary, fix, data)


def check_keys(environ: Mapping[str, str], scripted_model: bool) -> Check:
    """Which of Claude Code's key and endpoint variables are set: names only, never values."""
    keys = [name for name in KEY_VARIABLES if environ.get(name)]
    endpoint = [name for name in ENDPOINT_VARIABLES if environ.get(name)]
    data: dict[str, Any] = {"set": keys + endpoint}
    names = ", ".join(keys + endpoint)
    if keys:
        return Check("claudeKeys", "Claude Code keys", "ok", f"set: {names}", data=data)
    if scripted_model:
        return Check(
            "claudeKeys", "Claude Code keys", "ok", "none set (not needed with the scripted model)", data=data
        )
    summary = "no key variable is set (fine if you logged in with `claude` itself)"
    return Check("claudeKeys", "Claude Code keys", "warn", summary, f"export {KEY_VARIABLES[0]}=...", data)
