"""Everything Codex-specific: ``codex app-server`` per conversation (live), ``codex exec --json``
per prompt (command), its JSONL (mapper), its thread files (sessions).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path

from bridge.agents.codex import sessions
from bridge.agents.codex.command import launch_spec
from bridge.agents.codex.live import CodexLiveMode
from bridge.agents.codex.mapper import CodexEventMapper
from bridge.agents.seam import LiveMode
from bridge.agents.session_files import delete_file
from bridge.agents.values import LaunchSpec, RunOptions
from bridge.contract import ErrorInfo

__all__ = ["CodexAgent"]


class CodexAgent:
    """The `AgentAdapter` for Codex (live on ``codex app-server``; ``codex exec --json`` one-shot)."""

    name = "codex"
    display_name = "Codex"
    default_command: tuple[str, ...] = ("codex",)
    interrupt_signal = signal.SIGINT
    #: The bridge's bwrap does not wrap Codex's commands: its own sandbox modes do (command.py).
    can_sandbox = False

    def __init__(self) -> None:
        self._live = CodexLiveMode()

    def live_mode(self) -> LiveMode | None:
        """One ``codex app-server`` per conversation (the rpc engine)."""
        return self._live

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """``codex exec``, resuming the run's thread when it names one Codex has stored."""
        resume = bool(options.session_id) and not options.new_session
        return launch_spec(command, options, resume)

    def new_mapper(self, options: RunOptions) -> CodexEventMapper:
        """A fresh JSONL mapper for one attempt."""
        return CodexEventMapper(options)

    def session_exists(
        self, session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]
    ) -> bool:
        """Whether the run's thread is stored (``--continue`` without an id is not supported)."""
        return sessions.find_thread_file(session_id, env) is not None

    def resolve_session_id(self, session_id: str, env: Mapping[str, str]) -> str | None:
        """Codex names a thread by its whole id: that id, if it is stored."""
        return session_id if sessions.find_thread_file(session_id, env) is not None else None

    #: The file of the session the run continues and its size, before the first attempt; a failed
    #: attempt's rewind cuts it back, and drops a session it started.
    checkpoint_session = staticmethod(sessions.checkpoint)
    rewind_session = staticmethod(sessions.rewind)

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """A clear error for a Codex that could not be started."""
        return ErrorInfo(
            kind="spawn",
            message=f"could not start Codex ({' '.join(command)}): {reason}. Install it with "
            "`npm install -g @openai/codex` or set its command in initializationOptions.agents.",
            retryable=False,
        )

    def file_change_watch(self, cwd: str) -> None:
        """No diffs yet: Codex's file changes are not read."""
        return None

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """Remove the thread's rollout file."""
        return delete_file(sessions.find_thread_file(session_id, env))

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Codex's login (auth.json in its home)."""
        return (str(sessions.codex_home(env) / "auth.json"),)

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """Codex pointed at the scripted model's Responses API at `base_url`, its home in `workdir`."""
        from bridge.scripted_model.agent_configs import codex_env

        return codex_env(workdir, base_url.removesuffix("/v1"), "echo")
