"""pi's project trust: which files of a folder pi loads only when the folder is trusted, and the flag
that tells pi the decision (pi's docs/security.md, "Resources protected by project trust").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

#: Entries of a project's `.pi/` that need a trust decision (a bare `.pi/` does not).
PROTECTED_IN_CONFIG_DIR: Final = (
    "settings.json",
    "mcp.json",
    "extensions",
    "skills",
    "prompts",
    "themes",
    "SYSTEM.md",
    "APPEND_SYSTEM.md",
)
CONFIG_DIR: Final = ".pi"
#: Skills of the folder or any folder above it (the user's own `~/.agents/skills` excepted).
AGENTS_SKILLS: Final = os.path.join(".agents", "skills")


def protected_resources(cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """What pi would load from `cwd` only if it is trusted: `.pi/prompts`, `.pi/settings.json`,
    an `.agents/skills` of it or of a folder above (shown by its path); empty: nothing to ask.

    The same look as pi's own (existence only, symlinks followed), so the bridge asks exactly
    when pi would have needed a decision. Blocking I/O (a few stat calls)."""
    root = os.path.realpath(cwd)
    config = os.path.join(root, CONFIG_DIR)
    found = (
        [
            f"{CONFIG_DIR}/{entry}"
            for entry in PROTECTED_IN_CONFIG_DIR
            if os.path.exists(os.path.join(config, entry))
        ]
        if os.path.isdir(config)  # one stat for the usual folder, which has none
        else []
    )
    folder = root
    while True:
        skills = os.path.join(folder, AGENTS_SKILLS)
        if os.path.exists(skills) and skills != _users_own_skills(env):
            found.append(AGENTS_SKILLS if folder == root else skills)
        parent = os.path.dirname(folder)
        if parent == folder:
            return tuple(found)
        folder = parent


def _users_own_skills(env: Mapping[str, str]) -> str:
    """The user's own `~/.agents/skills` (pi loads it in every folder: nothing to ask)."""
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(os.path.realpath(home), AGENTS_SKILLS)


def trust_roots(cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """What a trust decision covers, as paths relative to `cwd` (absolute above it): the whole
    `.pi/` (its extensions may import any file of it, and packages installed into it are code)
    and each `.agents/skills` pi would load. A change under any asks again. A few stat calls."""
    skills = [r for r in protected_resources(cwd, env) if r.endswith(AGENTS_SKILLS)]
    return (CONFIG_DIR, *skills)


def trust_flags(trusted: bool) -> list[str]:
    """The flag that decides project trust for one pi process (in every launch)."""
    return ["--approve"] if trusted else ["--no-approve"]
