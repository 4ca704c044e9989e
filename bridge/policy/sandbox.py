"""The sandbox of a run's tool commands: which one a run gets, whether it can have it, and the
file the agent's extension reads it from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Final

import orjson

from bridge.contract import ErrorInfo, SandboxAvailability, SandboxSettings
from bridge.process import bwrap, seccomp

SANDBOX_DIR_ENV: Final = "PI_BRIDGE_SANDBOX_DIR"
SANDBOXES_DIR: Final = "sandboxes"
#: The seccomp filter's file in the board's directory (a session id never starts with a dot).
SECCOMP_FILE: Final = ".seccomp.bpf"
#: The fd the extension's shell opens the filter on for bwrap (`3<file`).
SECCOMP_FD: Final = 3
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
OFF: Final = SandboxSettings()

#: What a sandboxed command never sees under $HOME: the usual credentials (the agents' own come
#: from their adapters, `secret_files`).
HOME_SECRETS: Final = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
)
#: Names of variables that carry a credential: a sandboxed command does not get them.
SECRET_VAR: Final = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|^AWS_", re.I)
#: The bridge's own variables: each names a part of its state dir, or says how it runs.
BRIDGE_VAR_PREFIX: Final = "PI_BRIDGE_"
#: Except this one: it names no file, and a `tree` containment finds the run's processes by it.
RUN_TOKEN_VAR: Final = "PI_BRIDGE_RUN_TOKEN"
#: A launcher's tags (a test's): they name no file and hold no secret, and find the run's processes.
TAG_VAR_PREFIX: Final = "PI_BRIDGE_TEST_"
#: The bridge's variables a live agent gets whether or not they are in the bridge's environment.
BRIDGE_VARS: Final = (
    "PI_BRIDGE_GATE_DIR",
    "PI_BRIDGE_MCP_CONFIG",
    SANDBOX_DIR_ENV,
    "PI_BRIDGE_STATE_DIR",
    "PI_BRIDGE_LOG_FILE",
)
#: Variables that point at a unix socket of the session (the seccomp filter refuses it anyway).
SOCKET_VARS: Final = (
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "DOCKER_HOST",
)
#: Names a client may give in `initializationOptions.env` that are kept: ordinary, never a key.
KEPT_CLIENT_VARS: Final = re.compile(r"PATH|HOME|USER|LOGNAME|SHELL|TERM|TZ|TMPDIR|LANG|LANGUAGE|LC_[A-Z]+")
#: The workspace's hooks and config that no agent owns: read-only inside the sandbox (see the top);
#: each agent's own come from its adapter (`SandboxBoard.agent_config`).
WORKSPACE_CONFIG: Final = (".git", ".vscode", ".idea", ".mcp.json")
#: Under $HOME, what runs at a login or a git command: read-only when the workspace holds them.
HOME_STARTUP: Final = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".gitconfig",
    ".config/git",
    ".config/fish",
    ".config/autostart",
    ".config/systemd",
)


def settings_of(run_sandbox: SandboxSettings | None, default: SandboxSettings | None) -> SandboxSettings:
    """The run's sandbox: its own, else the server's default, else none."""
    return run_sandbox or default or OFF


def availability() -> SandboxAvailability:
    """Whether a sandbox can be had here (initialize's `sandbox`)."""
    found = bwrap.probe()
    if found.ok:
        return SandboxAvailability(available=True, kind="bwrap")
    return SandboxAvailability(available=False, kind="none", reason=found.reason, fix=found.fix)


def problem(settings: SandboxSettings, agent: str, can_wrap: bool) -> ErrorInfo | None:
    """Why a run cannot have the sandbox it asks for (None: it can, or asks for none)."""
    if settings.mode == "off":
        return None
    if not can_wrap:
        message = f"sandbox {settings.mode!r}: the bridge cannot sandbox {agent}'s commands; run it with "
        return _error(message + "`sandbox: {mode: off}` or use pi")
    found = bwrap.probe()
    if not found.ok:
        return _error(f"sandbox {settings.mode!r} cannot be had here: {found.reason}. Fix: {found.fix}")
    if seccomp.arch_of() is None:
        reason = "the bridge has no seccomp filter for this machine's arch (it has x86_64 and aarch64)"
        fix = "run without a sandbox (`sandbox: {mode: off}`)"
        return _error(f"sandbox {settings.mode!r} cannot be had here: {reason}. Fix: {fix}")
    return None


def hidden_paths(environ: Mapping[str, str], agent_secrets: Sequence[str] = ()) -> list[str]:
    """The secret files and dirs to mask, resolved (a symlinked ~/.ssh masks its target too)."""
    home = environ.get("HOME")
    paths = [os.path.join(home, name) for name in HOME_SECRETS] if home else []
    paths += agent_secrets
    resolved = {os.path.realpath(path) for path in paths} | set(paths)
    return sorted(resolved)


def secret_vars(environ: Mapping[str, str], given: Mapping[str, str] | None = None) -> list[str]:
    """The names of the variables a sandboxed command does not get: the secret-named ones, the
    bridge's own, the socket ones, and every one the client gave (`given`) but the ordinary."""
    names = {name for name in environ if SECRET_VAR.search(name) or name.startswith(BRIDGE_VAR_PREFIX)}
    names |= {name for name in given or {} if not KEPT_CLIENT_VARS.fullmatch(name)}
    names |= {*BRIDGE_VARS, *SOCKET_VARS}
    return sorted(name for name in names if name != RUN_TOKEN_VAR and not name.startswith(TAG_VAR_PREFIX))


def read_only_paths(
    workspace: str, environ: Mapping[str, str], agent_config: Sequence[str] = ()
) -> list[str]:
    """The workspace's hooks and config, the agents' (`agent_config`: paths, or names in the
    workspace), and $HOME's start-up files when the workspace holds them."""
    paths = [os.path.join(workspace, name) for name in (*WORKSPACE_CONFIG, *agent_config)]
    home = environ.get("HOME")
    if home and _under(os.path.realpath(home), workspace):
        paths += [os.path.join(home, name) for name in HOME_STARTUP]
    return paths


def _under(path: str, root: str) -> bool:
    """Whether `path` is `root` or inside it (both resolved)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def confinement(
    settings: SandboxSettings,
    cwd: str,
    environ: Mapping[str, str],
    agent_secrets: Sequence[str] = (),
    *,
    given: Mapping[str, str] | None = None,
    state: Path | None = None,
    agent_config: Sequence[str] = (),
) -> bwrap.Confinement:
    """The bwrap confinement of `settings` for a workspace `cwd` and the agent's environment:
    `given` is what the client gave (`initializationOptions.env`), `state` the bridge's state dir."""
    workspace = os.path.realpath(cwd)
    extra = [str(state), os.path.realpath(state)] if state is not None else []
    return bwrap.Confinement(
        workspace=workspace,
        writable=settings.mode == "workspace-write",
        network=settings.network,
        hidden=sorted({*hidden_paths(environ, agent_secrets), *extra}),
        unset_env=secret_vars(environ, given),
        read_only=read_only_paths(workspace, environ, agent_config),
        seccomp_fd=SECCOMP_FD,
    )


def whole_process_confinement(
    box: bwrap.Confinement, environ: Mapping[str, str], own_dirs: Sequence[str], kept: Collection[str]
) -> bwrap.Confinement:
    """`box` (see `confinement`) widened for an agent's whole process: its own dirs writable (the
    masks inside them lifted: its credentials are its own), $HOME shown read-only even under the
    private /tmp, the variables its model needs kept, and the network kept: it reaches its model
    through it (the run's `network: false` does not hold here, docs/security.md)."""
    home = environ.get("HOME")
    home_real = os.path.realpath(home) if home else None
    own: list[str] = []
    for path in own_dirs:
        real = os.path.realpath(path)
        if real == "/" or (home_real is not None and _under(home_real, real)):
            continue  # never $HOME itself (its secrets) nor above it
        own.append(real)
    hidden = [path for path in box.hidden if not any(_under(path, root) for root in own)]
    return dataclasses.replace(
        box,
        network=True,
        hidden=hidden,
        unset_env=[name for name in box.unset_env if name not in kept],
        shown=(home_real,) if home_real and home_real != "/" else (),
        writable_dirs=own,
    )


def make_own_dirs(paths: Sequence[str]) -> None:
    """Make each of an agent's own dirs that is missing (a name with an extension is a file,
    left to the agent), so its sandbox can bind them."""
    for path in paths:
        if not os.path.lexists(path) and not os.path.splitext(path)[1]:
            with contextlib.suppress(OSError):
                os.makedirs(path, mode=0o700, exist_ok=True)


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """A file's inode, size and change time (None: no such file): a board's file that still has
    the stamp it had when the board wrote it holds what the board wrote (one lstat)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_ctime_ns


class SandboxBoard:
    """One directory of this bridge process, a file per conversation run in a sandbox."""

    def __init__(self, root: Path, state: Path | None = None) -> None:
        #: The directory, unique to this bridge process; made (0700) with its first file.
        self.path = root / f"{os.getpid()}-{os.urandom(6).hex()}"
        #: The bridge's state dir, hidden from every sandbox (default: the one `root` is in).
        self.state = state if state is not None else root.parent
        self._made = False
        #: What each conversation's file holds, and its stamp once written (absent: no file).
        self._written: dict[str, tuple[bytes, tuple[int, int, int] | None]] = {}
        #: Every known agent's credential files, for the environment given (set by the registry).
        self.agent_secrets: Callable[[Mapping[str, str]], Sequence[str]] = lambda _environ: ()
        #: Every known agent's config in a workspace, for the environment given (set by the registry).
        self.agent_config: Callable[[str, Mapping[str, str]], Sequence[str]] = lambda _cwd, _environ: ()

    @staticmethod
    def prepare() -> None:
        """Find bwrap and learn what it can do (two short processes, their answers kept), off
        the first prompt's path: its first `publish` would wait on them on the event loop."""
        bwrap.probe()

    def agent_env(self) -> dict[str, str]:
        """The environment that tells the agent's extension where the sandboxes are."""
        return {SANDBOX_DIR_ENV: str(self.path)}

    def publish(
        self,
        session_id: str,
        settings: SandboxSettings,
        cwd: str,
        environ: Mapping[str, str],
        given: Mapping[str, str] | None = None,
    ) -> None:
        """Write the conversation's sandbox whole (temp file, then rename); `off` removes it.

        The file holds the mode, the workspace, bwrap's argv prefix and the seccomp filter's file
        (the prefix reads it on fd 3): the extension confines each command with them, and holds
        its own file tools to the workspace. `given` is the client's `initializationOptions.env`.
        A file that holds this sandbox already is left as it is (each prompt publishes its
        conversation's, and a write on the prompt's path waits on the disk).
        """
        if not _SAFE_NAME.fullmatch(session_id):
            return
        target = self.path / session_id
        found = bwrap.probe() if settings.mode != "off" else None  # `off` needs no bwrap: no probe
        if found is None or found.path is None:
            if self._written.pop(session_id, None) is not None:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
            return
        box = self._confinement(settings, cwd, environ, given)
        self._make()
        body = {
            "mode": settings.mode,
            "network": settings.network,
            "workspace": box.workspace,
            "hidden": list(box.hidden),
            "prefix": bwrap.argv_prefix(found.path, box),
            "seccomp": str(self.path / SECCOMP_FILE),
        }
        data = orjson.dumps(body)
        if self._written.get(session_id) != (data, file_stamp(target)):
            self._write(session_id, data)
            self._written[session_id] = (data, file_stamp(target))

    def _confinement(
        self, settings: SandboxSettings, cwd: str, environ: Mapping[str, str], given: Mapping[str, str] | None
    ) -> bwrap.Confinement:
        """What `settings` confine a run in `cwd` to (the box both pi's file and a whole agent use)."""
        return confinement(
            settings,
            cwd,
            environ,
            self.agent_secrets(environ),
            given=given,
            state=self.state,
            agent_config=self.agent_config(os.path.realpath(cwd), environ),
        )

    def process_prefix(
        self,
        settings: SandboxSettings,
        cwd: str,
        environ: Mapping[str, str],
        given: Mapping[str, str] | None,
        own_dirs: Sequence[str],
        kept: Collection[str],
    ) -> tuple[str, ...]:
        """The argv an agent's whole process starts under for `settings` (empty: off, or no
        bwrap here): bwrap's prefix of `whole_process_confinement`, its seccomp filter opened on
        fd 3 by a shell that then execs it. Blocking I/O (it makes the agent's own dirs)."""
        found = bwrap.probe()
        if settings.mode == "off" or found.path is None:
            return ()
        self._make()
        make_own_dirs(own_dirs)
        box = whole_process_confinement(
            self._confinement(settings, cwd, environ, given), environ, own_dirs, kept
        )
        shell = ("/bin/sh", "-c", 'exec "$@" 3<"$0"', str(self.path / SECCOMP_FILE))
        return (*shell, *bwrap.argv_prefix(found.path, box))

    def _make(self) -> None:
        """The board's directory and its seccomp filter, once."""
        if not self._made:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._write(SECCOMP_FILE, seccomp.program() or b"")
            self._made = True

    def command_line(self, session_id: str | None, command: str) -> list[str] | None:
        """`command` confined as the agent's shell confines it from the conversation's file
        (bwrap's prefix, its seccomp filter on fd 3): the argv another runner (the editor's
        terminal) starts; None when the conversation has no readable sandbox file."""
        if session_id is None or not _SAFE_NAME.fullmatch(session_id):
            return None
        try:
            box = orjson.loads((self.path / session_id).read_bytes())
            prefix, filter_file = box["prefix"], box.get("seccomp")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(prefix, list) or not prefix or not all(isinstance(w, str) for w in prefix):
            return None
        opened = f" 3<{shlex.quote(filter_file)}" if isinstance(filter_file, str) else ""
        line = f"exec {shlex.join(prefix)} bash -c {shlex.quote(command)}{opened}"
        return ["bash", "-c", line]

    def _write(self, name: str, data: bytes) -> None:
        """Write one file of the board whole: a temp file, then a rename."""
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=".sandbox-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, self.path / name)

    def remove(self) -> None:
        """Remove the directory (the bridge is done)."""
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            self._written.clear()
            self._made = False


def _error(message: str) -> ErrorInfo:
    return ErrorInfo(kind="sandbox", message=message, retryable=False)
