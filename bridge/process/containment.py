"""Cgroup containment: each agent runs in a cgroup of its own, so stopping the run stops everything."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

log = logging.getLogger(__name__)

CONTAINMENT_ENV: Final = "PI_BRIDGE_CONTAINMENT"
SHIM: Final = "/bin/sh"
# Writes the shim's own pid into each cgroup.procs given before `--`, then execs the agent.
_SHIM_SCRIPT: Final = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || { echo "pi-bridge: cannot enter cgroup $1" >&2; exit 126; }; '
    'shift; done; shift; exec "$@"'
)
_FREEZE_WAIT_SECONDS: Final = 0.5

Flavor = Literal["v2", "v1"]


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where run cgroups are created: the bridge's own cgroup in one or more mounted hierarchies."""

    flavor: Flavor
    # v2: one directory. v1: the freezer directory first (it enumerates and freezes), then pids.
    parents: tuple[Path, ...]


@dataclass(slots=True)
class RunCgroup:
    """One agent's cgroup (one directory per hierarchy), created before the agent and removed after."""

    hierarchy: Hierarchy
    dirs: tuple[Path, ...]
    removed: bool = field(default=False)
    _procs_path: str = field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        self._procs_path = str(self.dirs[0] / "cgroup.procs")

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The cgroup.procs files the shim writes its pid to."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def wrap(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """`argv` behind the shim that enters this cgroup before exec."""
        return (SHIM, "-c", _SHIM_SCRIPT, "pi-bridge-cgroup", *self.procs_files, "--", *argv)

    def members(self) -> list[int]:
        """Every process in the cgroup now (zombies may still be listed on v1)."""
        # os.read, not Path.read_text: after an idle spell (a cancel waits on pi) the text
        # layer's open costs noticeably more than the kernel's read.
        try:
            fd = os.open(self._procs_path, os.O_RDONLY)
        except OSError:
            return []
        try:
            chunks: list[bytes] = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        except OSError:
            return []
        finally:
            os.close(fd)
        return [int(line) for line in b"".join(chunks).split()]

    def kill_all(self) -> None:
        """One round of SIGKILL to every member; on v2 atomically, forks included."""
        if self.hierarchy.flavor == "v2":
            kill_file = self.dirs[0] / "cgroup.kill"
            if kill_file.exists():
                try:
                    kill_file.write_text("1")
                    return
                except OSError as exc:
                    log.warning("cgroup.kill failed (%s); killing members one by one", exc)
        self.kill_members(spare=None)

    def kill_members(self, spare: int | None) -> None:
        """SIGKILL every member but `spare`, frozen meanwhile so none can fork in between."""
        frozen = self._freeze(True)
        try:
            for pid in self.members():
                if pid != spare:
                    _signal(pid, signal.SIGKILL)
        finally:
            if frozen:
                self._freeze(False)

    def remove(self) -> bool:
        """Remove the cgroup's directories once empty; whether they are all gone."""
        if self.removed:
            return True
        ok = True
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.debug("cgroup %s not removed yet: %s", directory, exc)
                ok = False
        self.removed = ok
        return ok

    def _freeze(self, on: bool) -> bool:
        directory = self.dirs[0]
        if self.hierarchy.flavor == "v2":
            target, value, done = directory / "cgroup.freeze", "1" if on else "0", None
        else:
            target, value = directory / "freezer.state", "FROZEN" if on else "THAWED"
            done = "FROZEN"
        try:
            target.write_text(value)
        except OSError:
            return False
        if on:
            deadline = time.monotonic() + _FREEZE_WAIT_SECONDS
            while time.monotonic() < deadline:
                if done is not None:
                    if target.read_text().strip() == done:
                        break
                elif "frozen 1" in (directory / "cgroup.events").read_text():
                    break
                time.sleep(0.001)
        return True


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)  # a cgroup member: its pid cannot be reused while it is listed
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------- the probe


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, root inside the hierarchy, super options) of every cgroup mount."""
    found: list[tuple[str, Path, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((rest[0], Path(fields[4]), fields[3], set(rest[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: "" for v2, the controller names for v1."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        hier_id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        paths["" if hier_id == "0" else controllers] = path
    return paths


def _own_dir(mount: Path, root: str, own: str) -> Path | None:
    if own != root and not own.startswith(root.rstrip("/") + "/"):
        return None  # our cgroup is outside what this mount shows (a container's view)
    return mount / own[len(root) :].lstrip("/")


def _candidates() -> list[Hierarchy]:
    own = _own_paths()
    v2: list[Hierarchy] = []
    freezer: Path | None = None
    pids: Path | None = None
    for fstype, mount, root, options in _mounts():
        if fstype == "cgroup2" and "" in own:
            directory = _own_dir(mount, root, own[""])
            if directory is not None:
                v2.append(Hierarchy("v2", (directory,)))
            continue
        for controllers, path in own.items():
            names = set(controllers.split(","))
            if controllers and names <= options:
                directory = _own_dir(mount, root, path)
                if "freezer" in names:
                    freezer = directory
                elif "pids" in names:
                    pids = directory
    found = v2
    if freezer is not None:
        found.append(Hierarchy("v1", (freezer, pids) if pids is not None else (freezer,)))
    return found


def _works(hierarchy: Hierarchy) -> bool:
    """Create a child cgroup, move a short-lived shim into it, remove it: whether all of that works."""
    probe = RunCgroup(hierarchy, tuple(p / f"pi-bridge-probe-{os.getpid()}" for p in hierarchy.parents))
    made: list[Path] = []
    try:
        for directory in probe.dirs:
            directory.mkdir()
            made.append(directory)
        interface = ("cgroup.kill", "cgroup.freeze") if hierarchy.flavor == "v2" else ("freezer.state",)
        if not any((probe.dirs[0] / name).exists() for name in interface):
            return False
        result = subprocess.run(
            probe.wrap(("/bin/sh", "-c", "exit 0")), capture_output=True, timeout=10, check=False
        )
        return result.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        for directory in reversed(made):
            try:
                directory.rmdir()
            except OSError:
                pass


_lock = threading.Lock()
_chosen: list[Hierarchy | None] = []


def hierarchy() -> Hierarchy | None:
    """The hierarchy run cgroups go in, or None for tree mode (probed once; blocking, briefly)."""
    with _lock:
        if not _chosen:
            _chosen.append(_choose())
        return _chosen[0]


def _choose() -> Hierarchy | None:
    wanted = os.environ.get(CONTAINMENT_ENV, "auto").strip().lower()
    if wanted == "tree":
        log.info("containment: tree search (%s=tree)", CONTAINMENT_ENV)
        return None
    if not os.path.exists(SHIM):
        log.info("containment: tree search (no %s for the cgroup shim)", SHIM)
        return None
    for candidate in _candidates():
        if _works(candidate):
            log.info("containment: cgroup %s under %s", candidate.flavor, candidate.parents[0])
            _remove_stale(candidate)
            return candidate
    level = logging.WARNING if wanted == "cgroup" else logging.INFO
    log.log(level, "containment: tree search (no writable cgroup hierarchy)")
    return None


_RUN_CGROUP_NAME: Final = re.compile(r"pi-bridge-(\d+)-[0-9a-f]{12}")


def _remove_stale(chosen: Hierarchy) -> None:
    """Remove the empty run cgroups of bridges that are gone (killed before they could clean up).

    Only empty ones: rmdir refuses a populated cgroup, so a live run elsewhere is never touched.
    """
    for parent in chosen.parents:
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for entry in entries:
            match = _RUN_CGROUP_NAME.fullmatch(entry.name)
            if match is None or os.path.exists(f"/proc/{match.group(1)}"):
                continue
            try:
                entry.rmdir()
            except OSError:
                pass


def create_run_cgroup(chosen: Hierarchy) -> RunCgroup | None:
    """A fresh empty cgroup for one agent, or None when it cannot be made (then: tree mode)."""
    name = f"pi-bridge-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    group = RunCgroup(chosen, tuple(p / name for p in chosen.parents))
    made: list[Path] = []
    try:
        for directory in group.dirs:
            directory.mkdir()
            made.append(directory)
    except OSError as exc:
        log.warning("could not create cgroup %s: %s; using the tree search", name, exc)
        for directory in reversed(made):
            try:
                directory.rmdir()
            except OSError:
                pass
        return None
    return group
