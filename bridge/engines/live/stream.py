"""A live run's event lines as messages: the session message first, the steers pi took in noted,
its settle seen, and the conversation's stats on the terminal."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Final, Literal

import orjson

from bridge.agents.seam import AgentAdapter, EventMapper, LiveMode
from bridge.agents.values import CommandDone, LiveError, Out, RunOptions
from bridge.engines.endings import FirstStop
from bridge.engines.live.live_agent import LiveAgent
from bridge.engines.output import AttemptOutput

log = logging.getLogger(__name__)

STATS_TIMEOUT_SECONDS: Final = 2.0

Reason = Literal["settled", "cancel", "closed", "deadline", "silence", "refused", "internal"]


class LiveStream:
    """Maps what the live agent prints for one attempt (fed by the agent's reader)."""

    def __init__(
        self, mapper: EventMapper, mode: Callable[[], LiveMode], out: AttemptOutput, stop: FirstStop[Reason]
    ) -> None:
        self.mapper = mapper
        self._mode = mode
        self._out = out
        self._stop = stop
        self.agent: LiveAgent | None = None
        self._user_messages = 0
        self._session_sent = False
        self._session_line = b""
        self.last_output = time.monotonic()
        self.lines_seen = False
        #: Called when, during a cancel, the agent reports a tool ended: what the run started can
        #: go now, while the agent winds down (its answer then finds nothing left to kill).
        self.on_tool_ended_in_cancel: Callable[[], None] | None = None

    def begin(self, agent: LiveAgent, adapter: AgentAdapter, options: RunOptions) -> None:
        """Before the first prompt: a mapper that knows whether the session has history, and the
        session message it announces."""
        if not self._session_sent:
            self.mapper = adapter.new_mapper(dataclasses.replace(options, resumed=agent.history))
            self._session_line = orjson.dumps({"type": "session", "id": agent.session_id, "cwd": agent.cwd})

    def prompted(self) -> None:
        """The prompt is on its way to the agent: its silence counts from now. The spawn, start-up
        and settings before it are the bridge's waits, bounded by their own timeouts."""
        self.last_output = time.monotonic()

    def announce_session(self) -> None:
        """The run's session message, once, ahead of everything the agent then prints."""
        if not self._session_sent and self._session_line:
            self._session_sent = True
            self._out.send(self.mapper.feed(self._session_line))

    def on_lines(self, lines: list[bytes]) -> None:
        """pi's event lines, in the batch they were read in (called by pi's reader: whatever goes
        wrong here must end this run, never the reader every conversation depends on)."""
        self.last_output = time.monotonic()
        self.lines_seen = True
        try:
            self.announce_session()
            reason = self._stop.reason
            if self._out.fault is not None or (reason is not None and reason != "cancel"):
                return
            self.map_lines(lines)
        except Exception as exc:
            self._out.fail_inside(exc)

    def map_lines(self, lines: list[bytes]) -> None:
        """Map pi's lines; note the settle and the steers pi took in; send the messages."""
        outs: list[Out] = []
        mapper = self.mapper
        event_kind = self._mode().event_kind
        try:
            for line in lines:
                kind = event_kind(line)
                if kind == "settled":
                    self._stop.set("settled")
                    continue
                if kind == "run_end":
                    # Not the end yet: steering or queued work may follow until pi has settled.
                    continue
                if kind == "user_message":
                    outs.extend(self._on_user_message(line))
                    continue
                self._out.diffs.note_line(line)
                outs.extend(mapper.feed(line))
            for description in self._oversized():
                mapper.note_invalid(description)
        except Exception as exc:
            self._out.fail_inside(exc)  # and what was mapped before it still goes out
        if self._stop.reason == "cancel":
            self._in_cancel(outs)
        self._out.send(outs)

    def _in_cancel(self, outs: list[Out]) -> None:
        """The messages mapped during a cancel: the agent's abort closes the running tool as an
        error, which to the editor was cancelled; a tool's end lets the early sweep start."""
        ended = False
        for out in outs:
            if out.type == "tool.failed":
                out.content["cancelled"] = True
            ended = ended or out.type in ("tool.failed", "tool.completed")
        if ended and self.on_tool_ended_in_cancel is not None:
            self.on_tool_ended_in_cancel()

    def _oversized(self) -> list[str]:
        framer = self.agent.client.framer if self.agent else None
        if framer is None or not framer.oversized:
            return []
        found = list(framer.oversized)
        framer.oversized.clear()
        framer.oversized_heads.clear()
        return found

    def _on_user_message(self, line: bytes) -> list[Out]:
        """The prompt itself, then any steering message pi took into the run."""
        self._user_messages += 1
        if self._user_messages == 1:
            return []
        text = self._mode().user_text(line)
        return [] if text is None else [Out("run.steered", {"text": text})]

    def with_command_text(self, outs: list[Out], done: CommandDone | None) -> list[Out]:
        """A bridge command's answer as the run's one assistant delta, and its terminal's text."""
        terminal = next((out for out in outs if out.type == "terminal.completed"), None)
        if done is None or terminal is None or not done.text:
            return outs
        text = str(terminal.content.get("text") or "") + done.text
        terminal.content["text"] = text
        return [Out("assistant", {"text": done.text}), *outs]


async def add_stats(agent: LiveAgent, outs: list[Out]) -> None:
    """The conversation's context usage and cost on the run's terminal, when the agent tells them."""
    terminal = next((out for out in outs if out.type == "terminal.completed"), None)
    if terminal is None:
        return
    try:
        stats = await agent.client.stats(STATS_TIMEOUT_SECONDS)
    except LiveError as exc:
        log.info("no session stats: %s", exc)
        return
    if stats.context is not None:
        terminal.content["contextUsage"] = {
            "tokens": stats.context.tokens,
            "contextWindow": stats.context.context_window,
            "percent": stats.context.percent,
        }
    if stats.cost is not None:
        terminal.content["sessionCost"] = stats.cost
