"""What policy and checkpoints read and mark of a run: the runs layer's `Run` answers it.

A protocol, so the layers below runs/ name a run without importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio

from bridge.agents.seam import AgentAdapter
from bridge.agents.values import Out, RunOptions
from bridge.contract import PermissionMode
from bridge.engines.cancel import CancelToken
from bridge.policy.file_access import FileAccess


class RequestView(Protocol):
    """What policy and checkpoints read of a run's request (runs/request.py's RunRequest)."""

    @property
    def prompt(self) -> str: ...

    @property
    def mode(self) -> PermissionMode | None: ...


class RunView(Protocol):
    """One run as policy sees it: its ids, request, cancel token, and the marks policy leaves."""

    run_id: str
    options: RunOptions
    cancel: CancelToken
    session_id: str | None
    denied: set[str]
    judged_paths: dict[str, str]
    file_access: FileAccess | None
    before_tools: anyio.Event | None
    checkpoint_start: Callable[[], None] | None
    checkpoint_note: str | None

    @property
    def params(self) -> RequestView:
        """The run's request."""
        ...

    @property
    def sandboxed(self) -> bool:
        """Whether the run's tool commands are confined."""
        ...

    @property
    def agent(self) -> AgentAdapter:
        """The run's agent."""
        ...

    def emit(self, outs: list[Out]) -> None:
        """Send messages on the run's stream."""
        ...

    def take_checkpoint(self) -> None:
        """Start the snapshot before this prompt now, if it has not started."""
        ...
