"""An attempt's way to the client, the same in both engines: its messages through the diff
capture, fewer frames per batch, and the first bug met while handling them."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.agents.values import Out
from bridge.contract import ErrorInfo
from bridge.engines.attempt import AttemptContext
from bridge.engines.diff_capture import DiffCapture
from bridge.engines.endings import internal_error

log = logging.getLogger(__name__)


def coalesce(outs: list[Out]) -> list[Out]:
    """Fewer frames, same meaning, for the messages read in one chunk: adjacent assistant deltas
    become one message, and of a tool's cumulative updates only the last one is kept (each
    repeats the whole output so far: sending all of them is quadratic in bytes)."""
    if len(outs) < 2:
        return outs
    last_update: dict[str, int] = {}
    for index, out in enumerate(outs):
        if out.type == "tool.update":
            last_update[out.content["toolCallId"]] = index
    merged: list[Out] = []
    run: list[str] = []  # texts of the current run of adjacent deltas, joined once (linear)
    for index, out in enumerate(outs):
        if out.type == "assistant":
            run.append(out.content["text"])
            continue
        if out.type == "tool.update" and last_update[out.content["toolCallId"]] != index:
            continue
        if run:
            merged.append(Out("assistant", {"text": "".join(run)}))
            run = []
        merged.append(out)
    if run:
        merged.append(Out("assistant", {"text": "".join(run)}))
    return merged


class AttemptOutput:
    """Sends an attempt's messages; a bug in handling them fails the attempt (once) and stops it."""

    def __init__(
        self, context: AttemptContext, on_fault: Callable[[], None], describe: Callable[[], str]
    ) -> None:
        self._emit = context.emit
        self._name = context.adapter.display_name
        self._on_fault = on_fault
        self._describe = describe
        self.fault: ErrorInfo | None = None
        watch = context.adapter.file_change_watch(context.options.cwd)
        self.diffs = DiffCapture(watch, self._emit_coalesced, self.fail_inside)

    def send(self, outs: list[Out]) -> None:
        """Out to the client, after any diff they wait for."""
        self.diffs.send(outs)

    def _emit_coalesced(self, outs: list[Out]) -> None:
        self._emit(coalesce(outs))

    def fail_inside(self, exc: Exception) -> None:
        """A bug in handling the agent's output: the attempt fails with it (once) and stops."""
        if self.fault is None:
            log.error("%s failed inside the bridge", self._describe(), exc_info=exc)
            self.fault = internal_error(self._name, exc)
        self._on_fault()
