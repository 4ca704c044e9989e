"""The sandbox of a run's tool commands: which one a run gets, whether it can have it, and the
file the agent's extension reads it from.

A run's `sandbox` wins over `initializationOptions.sandbox`; without either, none. Asking for a
sandbox the bridge cannot give (no bwrap, no user namespaces, an agent it cannot wrap) fails the
run before anything runs: never a silent run without one.

Like the permission modes (gate.py), the sandbox lives in a file per conversation in the bridge's
state dir, written before the prompt goes to the agent: a live agent serves one conversation, and
its extension reads the file at each command, so each run's sandbox holds from its first command.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import orjson

from bridge.contract import ErrorInfo, SandboxAvailability, SandboxSettings
from bridge.process import bwrap

SANDBOX_DIR_ENV: Final = "PI_BRIDGE_SANDBOX_DIR"
SANDBOXES_DIR: Final = "sandboxes"
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
    return None


def hidden_paths(environ: Mapping[str, str], agent_secrets: Sequence[str] = ()) -> list[str]:
    """The secret files and dirs to mask, resolved (a symlinked ~/.ssh masks its target too)."""
    home = environ.get("HOME")
    paths = [os.path.join(home, name) for name in HOME_SECRETS] if home else []
    paths += agent_secrets
    resolved = {os.path.realpath(path) for path in paths} | set(paths)
    return sorted(resolved)


def secret_vars(environ: Mapping[str, str]) -> list[str]:
    """The names of the variables a sandboxed command does not get."""
    return sorted(name for name in environ if SECRET_VAR.search(name) and not name.startswith("PI_BRIDGE_"))


def confinement(
    settings: SandboxSettings, cwd: str, environ: Mapping[str, str], agent_secrets: Sequence[str] = ()
) -> bwrap.Confinement:
    """The bwrap confinement of `settings` for a workspace `cwd` and the agent's environment."""
    return bwrap.Confinement(
        workspace=os.path.realpath(cwd),
        writable=settings.mode == "workspace-write",
        network=settings.network,
        hidden=hidden_paths(environ, agent_secrets),
        unset_env=secret_vars(environ),
    )


class SandboxBoard:
    """One directory of this bridge process, a file per conversation run in a sandbox."""

    def __init__(self, root: Path) -> None:
        #: The directory, unique to this bridge process; made (0700) with its first file.
        self.path = root / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._made = False
        #: Every known agent's credential files, for the environment given (set by the registry).
        self.agent_secrets: Callable[[Mapping[str, str]], Sequence[str]] = lambda _environ: ()

    def agent_env(self) -> dict[str, str]:
        """The environment that tells the agent's extension where the sandboxes are."""
        return {SANDBOX_DIR_ENV: str(self.path)}

    def publish(
        self, session_id: str, settings: SandboxSettings, cwd: str, environ: Mapping[str, str]
    ) -> None:
        """Write the conversation's sandbox whole (temp file, then rename); `off` removes it.

        The file holds the mode, the workspace and bwrap's argv prefix: the extension confines
        each command with it, and holds its own file tools to the workspace.
        """
        if not _SAFE_NAME.fullmatch(session_id):
            return
        target = self.path / session_id
        found = bwrap.probe()
        if settings.mode == "off" or found.path is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            return
        box = confinement(settings, cwd, environ, self.agent_secrets(environ))
        body = {
            "mode": settings.mode,
            "network": settings.network,
            "workspace": box.workspace,
            "hidden": list(box.hidden),
            "prefix": bwrap.argv_prefix(found.path, box),
        }
        if not self._made:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._made = True
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=".sandbox-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(orjson.dumps(body))
        os.replace(temp, target)

    def remove(self) -> None:
        """Remove the directory (the bridge is done)."""
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            self._made = False


def _error(message: str) -> ErrorInfo:
    return ErrorInfo(kind="sandbox", message=message, retryable=False)
