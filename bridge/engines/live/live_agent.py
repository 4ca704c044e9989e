"""A live agent and a run's lease on its conversation, the values the live pool hands around."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import anyio
import psutil

from bridge.agents.seam import LiveClient, LiveMode
from bridge.agents.values import LiveState, RunOptions
from bridge.contract import ErrorInfo, ErrorKind, ShutdownReceipt
from bridge.process.spawn import ChildProcess

Argv = tuple[str, ...]
LiveKey = tuple[Argv, str, Argv | None, frozenset[tuple[str, str]], bool, str | None, Argv]


class NoLiveMode(Exception):
    """The agent command does not speak its live mode (it said so, or never answered at all)."""


class StartFailure(Exception):
    """A live agent could not be started or configured; carries the error for the attempt."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error

    @classmethod
    def retryable(cls, kind: ErrorKind, message: str) -> StartFailure:
        """A failure the same run may meet no more on its next attempt (busy, no session yet)."""
        return cls(ErrorInfo(kind=kind, message=message, retryable=True))


class CheckoutCancelled(Exception):
    """The run was cancelled while its live agent was being found, started or configured."""


class Launcher(Protocol):
    """What the registry needs from the agent seam to run a live agent."""

    display_name: str

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo: ...

    def live_mode(self) -> LiveMode | None: ...


def canonical_cwd(cwd: str) -> str:
    """One spelling per folder: no trailing slash, symlinks resolved (as the agent's getcwd sees it)."""
    return os.path.realpath(cwd)


def live_key(command: tuple[str, ...], options: RunOptions, env: Mapping[str, str]) -> LiveKey:
    """What must be identical for a live agent to take a run (anything else is a command): the
    project trust it was started with among them, since an agent loads its project files once,
    and its MCP servers, whose file is named by their whole content, so a process started for one
    set never serves another; and the sandbox its whole process was started in, if any."""
    key = (command, canonical_cwd(options.cwd), options.tools, frozenset(env.items()))
    return (*key, options.trusted, options.mcp_config, options.launch_prefix)


@dataclass(frozen=True)
class LiveLaunch:
    """How a live agent is started: the agent command, the run's options, the environment."""

    command: tuple[str, ...]
    options: RunOptions
    env: Mapping[str, str]

    @cached_property
    def key(self) -> LiveKey:
        """What an agent started so must match to take a run (see `live_key`)."""
        return live_key(self.command, self.options, self.env)


@dataclass(eq=False)
class LiveAgent:
    """One long-lived agent process and what the registry knows of it."""

    key: LiveKey
    child: ChildProcess
    client: LiveClient
    cwd: str
    session_id: str | None = None
    session_file: str | None = None
    history: bool = False
    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    busy: bool = False
    # Attempts it has been checked out for (the log says what an agent closed to make room served).
    checkouts: int = 0
    last_used: float = field(default_factory=time.monotonic)
    scope: anyio.CancelScope | None = None
    stopped: ShutdownReceipt | None = None
    # Two stops of one agent (a shutdown sweep and its own cancelled start) share one shutdown.
    stop_lock: anyio.Lock = field(default_factory=anyio.Lock)
    #: The processes its launch put between `child` and the agent (a sandbox's; see bwrap.WRAPPERS).
    wrappers: int = 0

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.child.pid

    @property
    def alive(self) -> bool:
        """Whether it can still take a prompt."""
        if self.child.returncode is not None or self.client.closed.is_set():
            return False
        exited = self.child.has_exited()  # killed a moment ago, its exit not collected yet
        if exited is not None:
            return not exited
        try:  # no pidfd: a zombie is what such a process looks like in /proc
            return bool(psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def take_state(self, state: LiveState, fallback_session: str | None) -> None:
        """What the agent reports of itself: its session, model, thinking and history."""
        self.session_id = state.session_id if state.session_id is not None else fallback_session
        self.session_file = state.session_file
        # What it runs now: a run naming only a model keeps its provider, and a first prompt
        # asking for the thinking level it runs sends nothing.
        self.provider = state.provider if state.provider is not None else self.provider
        self.model = state.model if state.model is not None else self.model
        self.thinking = state.thinking if state.thinking is not None else self.thinking
        self.history = state.message_count is not None and state.message_count > 0

    async def configure(self, options: RunOptions) -> None:
        """Provider, model and thinking of this run, by command, only where they change."""
        provider = options.provider or self.provider
        if provider and options.model and (provider, options.model) != (self.provider, self.model):
            await self.client.set_model(provider, options.model)
            self.provider, self.model = provider, options.model
        if options.thinking and options.thinking != self.thinking:
            await self.client.set_thinking(options.thinking)
            self.thinking = options.thinking


@dataclass(eq=False)
class Lease:
    """A run's hold on its conversation: one run at a time per session."""

    session_id: str | None
    lock: anyio.Lock | None = None
    live: LiveAgent | None = None
    # (session file, its mark before the last failed prompt): a retry cuts the file back to it
    trim: tuple[str, int | None] | None = None
    used_live: bool = False
    # A live slot reserved for the agent this lease is starting (or restarting).
    holds_slot: bool = False
