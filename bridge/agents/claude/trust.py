"""Claude Code's project files: which of a folder's files it loads on its own, and the flag that
keeps them out of an untrusted folder's runs.
"""

from __future__ import annotations

import os
from typing import Final

#: A project's files that Claude Code loads only from its project setting source.
PROTECTED: Final = (
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".claude/skills",
    ".mcp.json",
)


def protected_resources(cwd: str) -> tuple[str, ...]:
    """What Claude Code would load from `cwd` only if the folder is trusted; blocking I/O."""
    root = os.path.realpath(cwd)
    return tuple(entry for entry in PROTECTED if os.path.exists(os.path.join(root, entry)))


#: What a trust decision covers: all of `.claude/` (the scripts its hooks run live there too) and
#: `.mcp.json`. CLAUDE.md is left out: it is instructions, not code or settings.
TRUST_ROOTS: Final = (".claude", ".mcp.json")


def trust_roots(cwd: str) -> tuple[str, ...]:
    """What a trust decision covers, relative to `cwd`: a change under any asks again."""
    return TRUST_ROOTS


def trust_flags(trusted: bool, cwd: str) -> list[str]:
    """The user's settings only, for an untrusted folder that has files of its own to leave out;
    nothing otherwise. (The flag also leaves out the project's CLAUDE.md, so a folder with no
    other file of Claude Code's keeps it: there was nothing to ask about.) A few stat calls."""
    if trusted or not protected_resources(cwd):
        return []
    return ["--setting-sources", "user"]
