"""Codex's command line for one attempt: ``codex exec --json`` (``exec resume <thread>`` to go
on with a thread), the prompt on stdin, the model and Codex's own sandbox mode from the run."""

from __future__ import annotations

from typing import Final

from bridge.agents.values import LaunchSpec, RunOptions
from bridge.contract import SandboxSettings

#: The bridge's sandbox modes as Codex's own (`-s`): with no sandbox asked, Codex runs its
#: commands unconfined, as the bridge's other agents do.
SANDBOX_MODES: Final = {
    "off": "danger-full-access",
    "workspace-write": "workspace-write",
    "read-only": "read-only",
}


def sandbox_mode(sandbox: SandboxSettings | None) -> str:
    """Codex's ``--sandbox`` value for the run's ``sandbox`` setting."""
    if sandbox is None:
        return SANDBOX_MODES["off"]
    return SANDBOX_MODES[sandbox.mode]


def launch_spec(command: tuple[str, ...], options: RunOptions, resume: bool) -> LaunchSpec:
    """``codex exec [resume <thread>] --json ... -``: the prompt is read from stdin (never argv,
    which other users can read); approvals are never asked (exec has no one to ask)."""
    argv = [*command, "exec"]
    if resume and options.session_id:
        argv += ["resume", options.session_id]
    argv += ["--json", "--skip-git-repo-check", "-c", 'approval_policy="never"']
    argv += ["-c", f'sandbox_mode="{sandbox_mode(options.sandbox)}"']
    if options.model:
        argv += ["-m", options.model]
    argv.append("-")
    return LaunchSpec(argv=tuple(argv), cwd=options.cwd, stdin=options.prompt.encode("utf-8"))
