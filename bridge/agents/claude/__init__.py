"""Everything Claude Code-specific: flags (command), stream-json (mapper), errors, session files."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from bridge.agents.claude import sessions
from bridge.agents.claude.command import (
    DEFAULT_PERMISSION_MODE,
    PERMISSION_MODES,
    PermissionMode,
    launch_spec,
)
from bridge.agents.claude.file_changes import ClaudeFileChangeWatch
from bridge.agents.claude.live import ClaudeLiveMode
from bridge.agents.claude.mapper import ClaudeEventMapper
from bridge.agents.claude.trust import protected_resources, trust_roots
from bridge.agents.session_files import delete_file
from bridge.agents.values import LaunchSpec, RunOptions, WarmLaunch
from bridge.contract import ErrorInfo

__all__ = ["PERMISSION_MODES", "ClaudeAgent"]


class ClaudeAgent:
    """The `AgentAdapter` for Claude Code (`claude -p --output-format stream-json`)."""

    name = "claude"
    display_name = "Claude Code"
    default_command: tuple[str, ...] = ("claude",)
    interrupt_signal = signal.SIGINT

    def __init__(
        self, permission_mode: PermissionMode = DEFAULT_PERMISSION_MODE, allowed_tools: tuple[str, ...] = ()
    ) -> None:
        self.permission_mode: PermissionMode = permission_mode
        self.allowed_tools = allowed_tools
        # The bridge confines each tool call Claude Code asks about (sandbox.py): in its own
        # `plan` or `bypassPermissions` it asks about none, so the sandbox could not hold.
        self.can_sandbox = permission_mode not in ("plan", "bypassPermissions")
        self._live = ClaudeLiveMode(permission_mode, allowed_tools)

    @classmethod
    def from_settings(cls, permission_mode: str | None, allowed_tools: Sequence[str]) -> ClaudeAgent:
        """The adapter for the server's settings; raises ValueError for an unknown permission mode."""
        mode = permission_mode or DEFAULT_PERMISSION_MODE
        if mode not in PERMISSION_MODES:
            raise ValueError(f"permissionMode {mode!r}: not one of {', '.join(sorted(PERMISSION_MODES))}")
        return cls(cast("PermissionMode", mode), tuple(allowed_tools))

    def live_mode(self) -> ClaudeLiveMode:
        """One stream-json process per conversation (the rpc engine)."""
        return self._live

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """Claude Code's command line, environment and stdin for one attempt."""
        return launch_spec(command, options, self.permission_mode, self.allowed_tools)

    def new_mapper(self, options: RunOptions) -> ClaudeEventMapper:
        """A fresh stream-json mapper for one attempt."""
        return ClaudeEventMapper(options)

    def session_exists(
        self, session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]
    ) -> bool:
        """Whether the run resumes a stored Claude Code session."""
        return sessions.session_exists(session_id, continue_session, cwd, env)

    def resolve_session_id(self, session_id: str, env: Mapping[str, str]) -> str | None:
        """Claude Code names a session by its whole id only: that id, if it is stored."""
        return session_id if sessions.find_session_file(session_id, env) is not None else None

    #: The file of the session the run continues and its size, before the first attempt; a failed
    #: attempt's rewind cuts it back, and drops a session it started.
    checkpoint_session = staticmethod(sessions.checkpoint)
    rewind_session = staticmethod(sessions.rewind)

    def project_resources(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """What Claude Code loads from `cwd` unasked in `-p` mode (its `.claude/` settings,
        commands, agents, skills, and `.mcp.json`): left out unless the folder is trusted."""
        return protected_resources(cwd)

    def trust_roots(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """All of `.claude/` and `.mcp.json`: what a trust decision covers."""
        return trust_roots(cwd)

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """A clear error for a Claude Code that could not be started."""
        return ErrorInfo(
            kind="spawn",
            message=f"could not start Claude Code ({' '.join(command)}): {reason}. "
            "Install it with `npm install -g @anthropic-ai/claude-code` or set its command in "
            "initializationOptions.agents.",
            retryable=False,
        )

    def file_change_watch(self, cwd: str) -> ClaudeFileChangeWatch:
        """Which of Claude Code's Edit and Write calls change which file."""
        return ClaudeFileChangeWatch(cwd)

    #: Claude Code's sessions of a folder, newest first, and one session's history.
    list_sessions = staticmethod(sessions.list_sessions)
    read_session = staticmethod(sessions.read_session)

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """Remove the session's file (Claude Code keeps one file per session)."""
        return delete_file(sessions.find_session_file(session_id, env))

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Claude Code's credentials in its config dir, and ~/.claude.json (its account and keys)."""
        home = env.get("HOME") or str(Path.home())
        return (str(sessions.config_dir(env) / ".credentials.json"), os.path.join(home, ".claude.json"))

    def warm_launches(
        self, command: tuple[str, ...], options: RunOptions, session_created: str | None
    ) -> list[WarmLaunch]:
        """Nothing: Claude Code started before its prompt soon gives up on the empty stdin."""
        return []

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """Claude Code pointed at the Anthropic-compatible model at `base_url` (its `/v1` is the
        OpenAI-style root; Claude Code appends `/v1/messages` itself), its state in `workdir`."""
        config = workdir / "claude-config"
        config.mkdir(parents=True, exist_ok=True)
        return {
            "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model",
            "CLAUDE_CONFIG_DIR": str(config),
        }
