"""What an attempt is, in either engine: the `Attempt` protocol and the context it is made with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from bridge.agents.seam import AgentAdapter
from bridge.agents.values import Out, RunOptions
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptLimits, AttemptOutcome

Emit = Callable[[list[Out]], None]


class Attempt(Protocol):
    """One attempt of a run: it ends with exactly one terminal message, however it ends."""

    async def run(self) -> AttemptOutcome:
        """Run the attempt to its end; never raises for anything the agent does."""
        ...


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What every attempt is made with: the agent, the run's options, its way out and its bounds."""

    adapter: AgentAdapter
    command: tuple[str, ...]
    options: RunOptions
    emit: Emit
    cancel: CancelToken
    limits: AttemptLimits
    extra_env: Mapping[str, str] = field(default_factory=dict)
    on_started: Callable[[int], None] | None = None
