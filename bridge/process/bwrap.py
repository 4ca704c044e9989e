"""bubblewrap: whether it can confine a command here, and the argv that does."""

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
#: The processes between bwrap's caller and the command (bwrap, and the init of its new pid
#: namespace): a confined agent's own processes are that many levels further down.
WRAPPERS: Final = 2

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
    argv = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_isolation(found)]
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
    #: Paths inside the workspace bound read-only over its writable bind (those that exist).
    read_only: Sequence[str] = ()
    #: The fd the caller opens the seccomp filter on (seccomp.py), None: no filter.
    seccomp_fd: int | None = None
    #: Outside the workspace, bound as they are on the host before the masks: read-only ones (a
    #: private /tmp would hide one there), then writable ones (a whole agent's own state dirs).
    shown: Sequence[str] = ()
    writable_dirs: Sequence[str] = ()


def argv_prefix(bwrap: str, confinement: Confinement) -> list[str]:
    """bwrap's argv up to the command: the whole filesystem read-only, /dev and /proc of its own,
    a private /tmp, the workspace bound (read-write when `writable`) with its agent config and
    hooks read-only, the secrets hidden, no capability, the seccomp filter when given."""
    workspace = confinement.workspace
    above = [path for path in confinement.hidden if _under(workspace, path)]
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for flag, paths in (("--ro-bind", confinement.shown), ("--bind", confinement.writable_dirs)):
        for path in paths:
            if os.path.exists(path):
                argv += [flag, path, path]
    visible = (workspace, *confinement.shown, *confinement.writable_dirs)
    argv += _masks(above, visible)
    argv += ["--bind" if confinement.writable else "--ro-bind", workspace, workspace]
    if confinement.writable:
        argv += _read_only(confinement.read_only, workspace)
    argv += _masks((path for path in confinement.hidden if path not in above), visible)
    argv += [*_isolation(bwrap), "--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if not confinement.network:
        argv.append("--unshare-net")
    if confinement.seccomp_fd is not None:
        argv += ["--seccomp", str(confinement.seccomp_fd)]
    for name in sorted(set(confinement.unset_env)):
        argv += ["--unsetenv", name]
    argv += ["--chdir", workspace, "--"]
    return argv


def _isolation(bwrap: str) -> list[str]:
    """No capability and no nested user namespace, as root or not."""
    argv = ["--unshare-user", "--cap-drop", "ALL"]
    return [*argv, "--disable-userns"] if _has_disable_userns(bwrap) else argv


@functools.lru_cache(maxsize=8)
def _has_disable_userns(bwrap: str) -> bool:
    """Whether this bwrap knows `--disable-userns` (0.8.0 on); the seccomp filter covers older ones."""
    try:
        argv = [bwrap, "--help"]
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--disable-userns" in done.stdout + done.stderr


def _masks(paths: Iterable[str], visible: Sequence[str]) -> list[str]:
    """A mount over each path that exists, except in /tmp outside what is bound there (`visible`:
    the workspace and the shown dirs; the rest of /tmp is private already)."""
    argv: list[str] = []
    for path in paths:
        if _under(path, "/tmp") and not any(_under(path, root) for root in visible):
            continue
        target = Path(path)
        if target.is_dir() and not target.is_symlink():
            argv += ["--tmpfs", path]
        elif target.exists():
            argv += ["--ro-bind", os.devnull, path]
    return argv


def _read_only(paths: Iterable[str], workspace: str) -> list[str]:
    """A read-only bind of each path under the workspace that exists (resolved: a mount lands on
    a symlink's target, and one outside the workspace is read-only already). A path that does not
    exist gets nothing: a mount point would leave a file in the user's workspace."""
    argv: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if _under(real, workspace) and real != workspace and os.path.lexists(real):
            argv += ["--ro-bind", real, real]
    return argv


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
