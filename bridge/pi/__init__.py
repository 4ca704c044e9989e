"""Everything pi-specific: flags (command), events (mapper), errors, session files and their layout."""

from __future__ import annotations

import signal
from collections.abc import Mapping

from bridge.agent import LaunchSpec, RunOptions
from bridge.contract import ErrorInfo, SessionHistory, SessionNotFound, SessionSummary
from bridge.pi import session_files
from bridge.pi.command import launch_spec
from bridge.pi.file_changes import PiFileChangeWatch
from bridge.pi.mapper import PiEventMapper
from bridge.pi.sessions import session_exists


class PiAgent:
    """The `AgentAdapter` for the pi coding agent."""

    name = "pi"
    # SIGTERM, not SIGINT: on SIGINT pi dies at once and its bash tool's children (spawned
    # detached, in their own session) survive; on SIGTERM pi's own handler kills them first
    # (pi-facts.md, "Signals and the process tree").
    interrupt_signal = signal.SIGTERM
    default_command: tuple[str, ...] = ("pi",)
    supports_rpc = True
    supports_warm_start = True

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """pi's command line, environment and stdin for one attempt."""
        return launch_spec(command, options)

    def new_mapper(self, options: RunOptions) -> PiEventMapper:
        """A fresh pi event mapper for one attempt."""
        return PiEventMapper(options)

    def session_exists(
        self, session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]
    ) -> bool:
        """Whether the run resumes an existing pi session (its file existed before the run)."""
        return session_exists(session_id, continue_session, cwd, env)

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """A clear error for a pi that could not be started."""
        return ErrorInfo(
            kind="spawn",
            message=f"could not start pi ({' '.join(command)}): {reason}. "
            "Install it with `npm install -g @earendil-works/pi-coding-agent` or set "
            "initializationOptions.piCommand, --pi-command or PI_BRIDGE_PI_COMMAND.",
            retryable=False,
        )

    def file_change_watch(self, cwd: str) -> PiFileChangeWatch:
        """Which of pi's edit and write calls change which file, read off pi's events."""
        return PiFileChangeWatch(cwd)

    def list_sessions(self, cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
        """pi's sessions of `cwd`, newest first, read from its session files."""
        return session_files.list_sessions(cwd, limit, env)

    def read_session(self, session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
        """One pi session's history, read from its session file."""
        return session_files.read_session(session_id, env)
