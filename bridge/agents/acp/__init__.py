"""Any agent that speaks ACP (the Agent Client Protocol) over stdio, behind one adapter."""

from __future__ import annotations

import fnmatch
import signal
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.agents.acp.catalog import CATALOG, MCP_ENV, SESSION_ENV, SETTLED_LINE, AcpAgentSpec
from bridge.agents.acp.mapper import AcpEventMapper

if TYPE_CHECKING:
    from bridge.agents.acp.kept_options import AcpConversationLive, KeptOptions
from bridge.agents.model_errors import RETRYABLE_KINDS
from bridge.agents.seam import FileChangeWatch
from bridge.agents.values import EventKind, LaunchSpec, RunOptions
from bridge.contract import ErrorInfo, ErrorKind
from bridge.process.spawn import ChildProcess

__all__ = ["CATALOG", "AcpAgent"]


def classify_exit(exit_code: int | None, signal_name: str | None, stderr: str) -> tuple[ErrorKind, bool]:
    """An ACP agent that ended mid-turn: a process failure, retryable (its next process loads
    the session again)."""
    return "process", "process" in RETRYABLE_KINDS


class AcpLiveMode:
    """The `LiveMode` of an ACP agent: one process per conversation."""

    def __init__(self, spec: AcpAgentSpec) -> None:
        self.spec = spec
        # The sessions this bridge has seen each agent open (ACP agents store sessions their own
        # way): a conversation whose process died is loaded again from these.
        # bridge id -> the agent's own id (they differ when the bridge named the conversation)
        self.opened: dict[str, str] = {}
        self.kept: KeptOptions | None = None

    def launch_spec(
        self, command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
    ) -> LaunchSpec:
        """The agent's command; which session it opens travels in its environment (SESSION_ENV)."""
        if options.session_id:
            sid = options.session_id
            plan = f"load:{self.opened.get(sid, sid)}|{sid}"
        elif new_session_id:
            plan = f"new:{new_session_id}"
        else:
            plan = "new"
        env = {**self.spec.env, SESSION_ENV: plan}
        if self.spec.model_env and options.model:
            env[self.spec.model_env] = options.model
        if options.mcp_config:
            env[MCP_ENV] = options.mcp_config
        # a sandboxed run's whole agent process starts inside its sandbox (its tools are its own)
        return LaunchSpec(argv=(*options.launch_prefix, *command), cwd=options.cwd, env=env)

    def client(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> AcpConversationLive:
        """The ACP client of an agent process just spawned (the ACP SDK's schema is imported
        here: building the adapter, which every bridge's initialize does, stays cheap); what the
        editor set of the conversation's own options outlives it (`KeptOptions`)."""
        from bridge.agents.acp.kept_options import AcpConversationLive, KeptOptions

        if self.kept is None:
            self.kept = KeptOptions()
        return AcpConversationLive(
            child, self.spec, wait_writable=wait_writable, on_session=self.opened.__setitem__, kept=self.kept
        )

    def event_kind(self, line: bytes) -> EventKind | None:
        """The client's settled line (the prompt answered); the rest goes to the mapper."""
        return "settled" if line == SETTLED_LINE else None

    def user_text(self, line: bytes) -> str | None:
        """None: the prompt is not echoed back."""
        return None

    def latest_session_id(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """None: the agent's sessions are its own (continueSession starts a new one)."""
        return None

    def session_stored(self, session_id: str, cwd: str, env: Mapping[str, str]) -> bool:
        """Whether an agent of this bridge opened the session (it can be loaded again)."""
        return session_id in self.opened

    def session_file(self, session_id: str, cwd: str, env: Mapping[str, str]) -> str | None:
        """None: no file the bridge reads."""
        return None

    def session_mark(self, path: str | None) -> int | None:
        """None (no file)."""
        return None

    def cut_session_back(self, path: str, mark: int | None) -> None:
        """Nothing (no file)."""

    def classify_exit(
        self, exit_code: int | None, signal_name: str | None, stderr: str
    ) -> tuple[ErrorKind, bool]:
        """See `classify_exit`."""
        return classify_exit(exit_code, signal_name, stderr)

    def lacks_live_mode(self, stderr: str) -> bool:
        """False: an ACP agent is live or nothing."""
        return False

    def silence_may_mean_no_live_mode(self) -> bool:
        """False: a silent ACP agent is a slow start."""
        return False


class AcpAgent:
    """The `AgentAdapter` of one ACP agent of the catalog."""

    interrupt_signal = signal.SIGINT

    def __init__(self, spec: AcpAgentSpec) -> None:
        self.spec = spec
        #: A sandbox confines the whole process of an agent whose own dirs the catalog names.
        self.can_sandbox = spec.own_dirs is not None
        self.name = spec.name
        self.display_name = spec.display_name
        self.default_command = spec.command
        self._live = AcpLiveMode(spec)

    def live_mode(self) -> AcpLiveMode:
        """Always live: ACP has no one-shot form."""
        return self._live

    def launch_spec(self, command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
        """The live launch (a one-shot attempt is never made: the live mode has no fallback)."""
        return self._live.launch_spec(command, options)

    def new_mapper(self, options: RunOptions) -> AcpEventMapper:
        """A fresh mapper of session/update for one attempt."""
        return AcpEventMapper(options, self.display_name, classify_exit)

    def session_exists(
        self, session_id: str | None, continue_session: bool, cwd: str, env: Mapping[str, str]
    ) -> bool:
        """Whether this bridge saw the agent open the session."""
        return session_id is not None and session_id in self._live.opened

    def resolve_session_id(self, session_id: str, env: Mapping[str, str]) -> str | None:
        """The whole id only, of a session this bridge saw opened."""
        return session_id if session_id in self._live.opened else None

    def own_session_id(self, session_id: str) -> str | None:
        """The agent's own id of a session this bridge opened on it (RecordedSessions)."""
        return self._live.opened.get(session_id)

    def adopt_session(self, session_id: str, own_id: str) -> None:
        """A session of the bridge's record (one opened before a restart): loaded by `own_id`."""
        self._live.opened.setdefault(session_id, own_id)

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        """A clear error for an agent that could not be started."""
        return ErrorInfo(
            kind="spawn",
            message=f"could not start {self.display_name} ({' '.join(command)}): {reason}. Install it "
            f"with `npm install {self.spec.package}` (scripts/setup.sh does) or set its command in "
            "initializationOptions.agents.",
            retryable=False,
        )

    def file_change_watch(self, cwd: str) -> FileChangeWatch | None:
        """None: its tools' changes are not read (no diffs)."""
        return None

    def delete_session(self, session_id: str, env: Mapping[str, str]) -> bool:
        """False: nothing of the bridge's to delete."""
        return False

    def secret_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """None known."""
        return ()

    def own_dirs(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Where the catalog says it keeps its state (writable in its sandbox)."""
        return self.spec.own_dirs(env) if self.spec.own_dirs is not None else ()

    def model_vars(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The names in `env` its model needs (the catalog's patterns)."""
        patterns = (*self.spec.model_vars, *self.spec.env)
        return tuple(name for name in env if any(fnmatch.fnmatchcase(name, p) for p in patterns))

    def model_server_env(self, base_url: str, workdir: Path, provider: str) -> dict[str, str]:
        """The agent pointed at the model server at `base_url` (the catalog says how)."""
        if self.spec.model_server_env is None:
            return {}
        return self.spec.model_server_env(base_url, workdir, provider)


def build(name: str) -> AcpAgent:
    """The adapter of catalog entry `name` (KeyError for an unknown one)."""
    return AcpAgent(CATALOG[name])


def build_custom(name: str, command: tuple[str, ...]) -> AcpAgent:
    """The adapter of an ACP agent the catalog does not know, configured by its command alone."""
    return AcpAgent(AcpAgentSpec(name=name, display_name=name, command=command, package=command[0]))
