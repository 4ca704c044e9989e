"""Everything pi-specific: flags (command), events (mapper), errors, session files and their layout."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bridge.agents.pi import sessions
from bridge.agents.pi.command import launch_spec
from bridge.agents.pi.file_changes import PiFileChangeWatch
from bridge.agents.pi.live import PiLiveMode
from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.pi.session_paths import AGENT_DIR_ENV, resolve_session_id, session_exists
from bridge.agents.pi.trust import protected_resources, trust_roots
from bridge.agents.seam import LiveMode
from bridge.agents.session_files import delete_file
from bridge.agents.values import LaunchSpec, RunOptions, WarmLaunch
from bridge.contract import ErrorInfo
from bridge.process.spawn import environ_with

# Staggered: two Node start-ups at once on a small machine slow both, and whatever run comes next.
FOLLOW_UP_PRIME_DELAY_SECONDS: Final = 3.0
_LIVE_MODE: Final = PiLiveMode()


class PiAgent:
    """The `AgentAdapter` for the pi coding agent."""

    name = "pi"
    display_name = "pi"
    # SIGTERM, not SIGINT: on SIGINT pi dies at once and its bash tool's children (spawned
    # detached, in their own session) survive; on SIGTERM pi's own handler kills them first.
    interrupt_signal = signal.SIGTERM
    default_command: tuple[str, ...] = ("pi",)
    # The bridge's extension wraps pi's bash tool in bubblewrap (extension/index.ts).
    can_sandbox = True

    def live_mode(self) -> LiveMode:
        """pi's `--mode rpc`: one long-lived pi per conversation."""
        return _LIVE_MODE

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

    def resolve_session_id(self, session_id: str, env: Mapping[str, str]) -> str | None:
        """The full id of the pi session named by an id, a unique prefix of one, or its file."""
        return resolve_session_id(session_id, env)

    #: The session file a run continues and its size before the first attempt; a failed attempt's
    #: rewind cuts it back (pi appends, so no earlier turn is touched).
    checkpoint_session = staticmethod(sessions.checkpoint)
    rewind_session = staticmethod(sessions.rewind)

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """A clear error for a pi that could not be started."""
        return ErrorInfo(
            kind="spawn",
            message=f"could not start pi ({' '.join(command)}): {reason}. "
            "Install it with `npm install -g @earendil-works/pi-coding-agent` or set "
            "initializationOptions.piCommand, --pi-command or PI_BRIDGE_PI_COMMAND.",
            retryable=False,
        )

    def project_resources(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """What pi loads from `cwd` only when the folder is trusted (its `.pi/` settings,
        extensions, skills, prompts, themes, system prompts, `mcp.json`; `.agents/skills`)."""
        return protected_resources(cwd, environ_with(env))

    def trust_roots(self, cwd: str, env: Mapping[str, str]) -> tuple[str, ...]:
        """The whole `.pi/` and the `.agents/skills` pi loads: what a trust decision covers."""
        return trust_roots(cwd, environ_with(env))

    def file_change_watch(self, cwd: str) -> PiFileChangeWatch:
        """Which of pi's edit and write calls change which file, read off pi's events."""
        return PiFileChangeWatch(cwd)

    #: pi's sessions of a folder, newest first, and one session's history, from its session files.
    list_sessions = staticmethod(sessions.list_sessions)
    read_session = staticmethod(sessions.read_session)

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """Remove the session's file (pi keeps one file per session)."""
        return delete_file(sessions.find_session_file(session_id, env))

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """pi's auth.json, in its agent dir and in the default one."""
        home = env.get("HOME") or str(Path.home())
        default = os.path.join(home, ".pi", "agent")
        return tuple(
            os.path.join(d, "auth.json") for d in dict.fromkeys((env.get(AGENT_DIR_ENV) or default, default))
        )

    def warm_launches(
        self, command: tuple[str, ...], options: RunOptions, session_created: str | None
    ) -> list[WarmLaunch]:
        """The same launch again, and the same launch resuming the session this run created
        (an editor's next turn of a conversation). `--continue` is never primed: which session
        is "latest" may change before the next run."""
        if options.continue_session:
            return []
        again = dataclasses.replace(launch_spec(command, options), stdin=b"")
        launches = [WarmLaunch(again, options.session_id)]
        if options.session_id is None and session_created:
            follow_up = dataclasses.replace(options, session_id=session_created, resumed=True)
            spec = dataclasses.replace(launch_spec(command, follow_up), stdin=b"")
            launches.append(WarmLaunch(spec, session_created, FOLLOW_UP_PRIME_DELAY_SECONDS))
        return launches

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """A pi agent dir in `workdir` whose `provider` is the model at `base_url`."""
        from bridge.scripted_model import write_pi_agent_dir

        write_pi_agent_dir(workdir, base_url, provider=provider)
        return {AGENT_DIR_ENV: str(workdir)}
