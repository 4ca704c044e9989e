"""bubblewrap: whether it can confine a command here, and the argv that does.

The argv is a prefix: the command to confine goes after it. Its order matters: bwrap applies
mounts in order, so the private /tmp comes before the workspace bind (a workspace under /tmp would
be hidden by a later tmpfs), and the masks come last.

Nothing here knows an agent: the caller says what to mask and which variables to drop.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PROBE_TIMEOUT_SECONDS: Final = 10.0

INSTALL_FIX: Final = (
    "install bubblewrap: `apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` "
    "(Fedora, RHEL), `pacman -S bubblewrap` (Arch), `zypper install bubblewrap` (openSUSE), "
    "`apk add bubblewrap` (Alpine); or run without a sandbox (`sandbox: {mode: off}`)"
)
USERNS_FIX: Final = (
    "allow unprivileged user namespaces: `sysctl kernel.unprivileged_userns_clone=1` (Debian), "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap "
    "(Ubuntu 23.10 and later), `sysctl user.max_user_namespaces=15000` (RHEL); in a container, "
    "run it with user namespaces allowed (e.g. a seccomp profile that permits them)"
)


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether bwrap works here: its path, or why not and the fix."""

    path: str | None
    reason: str | None = None
    fix: str | None = None

    @property
    def ok(self) -> bool:
        """Whether a sandboxed command can run."""
        return self.path is not None and self.reason is None


def probe(search_path: str | None = None) -> Availability:
    """Find bwrap on `search_path` (default: PATH) and check that it can make its namespaces."""
    return _probe(search_path if search_path is not None else os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=8)
def _probe(search_path: str) -> Availability:
    found = shutil.which("bwrap", path=search_path)
    if found is None:
        return Availability(None, "bubblewrap (bwrap) is not on PATH", INSTALL_FIX)
    argv = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
    argv += ["--unshare-net", "--die-with-parent", "--", "/bin/sh", "-c", ":"]  # /bin/sh: POSIX's
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Availability(None, f"bwrap could not run: {exc}", INSTALL_FIX)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = f"bwrap cannot create its namespaces: {said[-1] if said else f'exit {done.returncode}'}"
        return Availability(None, reason, USERNS_FIX)
    return Availability(found)


@dataclass(frozen=True, slots=True)
class Confinement:
    """What one sandbox allows: the workspace (writable or not), the network, what it hides."""

    workspace: str
    writable: bool
    network: bool
    #: Directories to hide behind an empty tmpfs, files behind an empty one (/dev/null).
    hidden: Sequence[str] = ()
    #: Environment variables the confined command does not get.
    unset_env: Sequence[str] = ()


def argv_prefix(bwrap: str, confinement: Confinement) -> list[str]:
    """bwrap's argv up to the command: the whole filesystem read-only, /dev and /proc of its own,
    a private /tmp, the workspace bound (read-write when `writable`), the secrets hidden."""
    workspace = confinement.workspace
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += ["--bind" if confinement.writable else "--ro-bind", workspace, workspace]
    argv += _masks(confinement.hidden, workspace)
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if not confinement.network:
        argv.append("--unshare-net")
    for name in sorted(set(confinement.unset_env)):
        argv += ["--unsetenv", name]
    argv += ["--chdir", workspace, "--"]
    return argv


def _masks(paths: Iterable[str], workspace: str) -> list[str]:
    """A mount over each path that exists, outside /tmp (private already) and the workspace."""
    argv: list[str] = []
    for path in paths:
        if _under(path, "/tmp") or _under(path, workspace) or _under(workspace, path):
            continue
        target = Path(path)
        if target.is_dir() and not target.is_symlink():
            argv += ["--tmpfs", path]
        elif target.exists():
            argv += ["--ro-bind", os.devnull, path]
    return argv


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
