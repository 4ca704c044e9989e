"""The bridge's sandbox for Claude Code's tools: each call it asks about is confined or refused."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

#: Where the bridge keeps each conversation's sandbox (as policy/sandbox.py names it for pi's too).
SANDBOX_DIR_ENV: Final = "PI_BRIDGE_SANDBOX_DIR"
#: Claude Code's settings of a sandboxed conversation: it asks before every tool call.
SETTINGS: Final = '{"permissions":{"ask":["*"]}}'
#: The tools whose path argument the rules below judge, and the argument's name.
PATH_ARGUMENT: Final = {
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "NotebookRead": "notebook_path",
    "Glob": "path",
    "Grep": "path",
    "LS": "path",
}
_WRITES: Final = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
_NETWORK: Final = frozenset({"WebFetch", "WebSearch"})
#: Claude Code's own tools that touch no file and run no command of their own.
_INNER: Final = frozenset(
    {
        "Task",
        "Agent",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskUpdate",
        "TodoWrite",
        "AskUserQuestion",
        "ExitPlanMode",
        "Skill",
        "SendMessage",
        "ReportFindings",
        "CronCreate",
        "CronDelete",
        "CronList",
        "ScheduleWakeup",
        "BashOutput",
        "KillShell",
        "KillBash",
    }
)
#: What no file tool reaches, whatever the workspace.
_SYSTEM: Final = ("/proc", "/sys", "/dev")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """One conversation's sandbox as the bridge wrote it: mode, network, workspace, masks, prefix."""

    mode: str
    network: bool
    workspace: str
    hidden: tuple[str, ...]
    prefix: tuple[str, ...]
    #: The seccomp filter's file, which the prefix reads on fd 3 (None: a prefix without one).
    seccomp: str | None = None


#: The sandbox of a conversation whose sandbox cannot be read: no command, no file, no network.
UNREADABLE: Final = Sandbox("read-only", False, "/nonexistent", (), ())


@dataclass(frozen=True, slots=True)
class Confined:
    """A call the sandbox lets through (its input as it will run), or why it refuses it."""

    input: dict[str, Any]
    refused: str | None = None


def read_sandbox(environ: Mapping[str, str], session_id: str | None) -> Sandbox | None:
    """The conversation's sandbox now (None: it has none), read at each call as pi's extension does."""
    folder = environ.get(SANDBOX_DIR_ENV)
    if not folder or not session_id or "/" in session_id or session_id.startswith("."):
        return None
    try:
        body = orjson.loads((Path(folder) / session_id).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError):
        return UNREADABLE  # a sandbox the bridge wrote but that cannot be read
    prefix, hidden, seccomp = body.get("prefix"), body.get("hidden"), body.get("seccomp")
    return Sandbox(
        mode=str(body.get("mode")),
        network=body.get("network") is True,
        workspace=str(body.get("workspace")),
        hidden=tuple(str(path) for path in hidden) if isinstance(hidden, list) else (),
        prefix=tuple(str(word) for word in prefix) if isinstance(prefix, list) else (),
        seccomp=seccomp if isinstance(seccomp, str) else None,
    )


def confine(tool: str, arguments: dict[str, Any], box: Sandbox) -> Confined:
    """The call `tool(arguments)` as it may run in `box`, or why it may not."""
    if tool == "Bash":
        command = arguments.get("command")
        if not isinstance(command, str) or not box.prefix:
            return Confined(arguments, "sandbox: no command to confine")
        return Confined({**arguments, "command": wrapped(command, box.prefix, box.seccomp)})
    if tool in PATH_ARGUMENT:
        path = arguments.get(PATH_ARGUMENT[tool])
        if path is None and tool in ("Glob", "Grep", "LS"):
            path = box.workspace  # their default: the working directory
        if not isinstance(path, str):
            return Confined(arguments, "sandbox: no path to check")
        reason = refusal(path, box.workspace, box.hidden)
        if reason is None and tool in _WRITES and box.mode != "workspace-write":
            reason = f"the sandbox is {box.mode}: no file may be written"
        return Confined(arguments, f"sandbox: {reason}" if reason else None)
    if tool in _NETWORK:
        return Confined(arguments, None if box.network else "sandbox: the network is off")
    if tool in _INNER or tool.startswith("mcp__"):
        return Confined(arguments)
    return Confined(arguments, f"sandbox: {tool} cannot be confined, so it does not run")


def wrapped(command: str, prefix: Sequence[str], seccomp: str | None = None) -> str:
    """`command` run by a shell under bwrap's `prefix`, quoted for Claude Code's own shell; the
    seccomp filter's file opened on fd 3, where the prefix's `--seccomp 3` reads it."""
    words = list(prefix)
    if "--cap-drop" not in words and words and words[-1] == "--":
        words[-1:] = ["--cap-drop", "ALL", "--"]  # no capability, even for root
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    opened = f" 3<{shlex.quote(seccomp)}" if seccomp is not None else ""
    return shlex.join([*words, shell, "-c", command]) + opened


def refusal(path: str, workspace: str, hidden: Sequence[str]) -> str | None:
    """Why a file tool may not touch `path` (None: it may): outside the workspace after every
    symlink, or in a masked secret or /proc, /sys or /dev as written or as resolved. `~`, a
    leading `@` and `file://` are read as the agents read them; each reading must pass."""
    root = os.path.realpath(workspace)
    bare = path.removeprefix("file://")
    spellings = {path, bare, os.path.expanduser(bare)}
    if bare.startswith("@"):
        spellings |= {bare[1:], os.path.expanduser(bare[1:])}
    for spelling in spellings:
        lexical = os.path.normpath(os.path.join(root, spelling))
        resolved = _resolved(lexical)
        for reading in (lexical, resolved):
            if any(_under(reading, system) for system in _SYSTEM):
                return f"{path} is a system path"
            if any(_under(reading, secret) for secret in hidden):
                return f"{path} is a masked secret"
        if not _under(resolved, root):  # where it lands: a symlinked spelling of the workspace is in it
            return f"{path} is outside the workspace {root}"
    return None


def _resolved(path: str) -> str:
    """`path` with every symlink followed (a dangling one to where it points)."""
    with contextlib.suppress(OSError, ValueError):
        return os.path.realpath(path)
    return path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
