"""The editor's own file surface: a read or a write of the agent's file tools done by the editor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol


@dataclass(frozen=True, slots=True)
class EditorAnswer:
    """What the editor did with one operation.

    `taken` False: not the editor's (no such capability, or a file it does not hold): the bridge
    does it on the disk. Taken: `text` is a read's text, `error` the refusal the tool throws.
    """

    taken: bool
    text: str | None = None
    error: str | None = None


NOT_THE_EDITORS: Final = EditorAnswer(taken=False)


@dataclass(frozen=True, slots=True)
class TerminalState:
    """One of the editor's terminals now: its output so far, and whether (and how) it ended;
    `error`: the editor did not answer (the terminal is then ended)."""

    output: str = ""
    exited: bool = False
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None


class EditorFiles(Protocol):
    """A front's editor, which may read and write the files of a session's agent."""

    async def read_text(self, session_id: str, path: str) -> EditorAnswer:
        """The text the editor holds for `path` (absolute, judged by the policy)."""
        ...

    async def write_text(self, session_id: str, path: str, text: str) -> EditorAnswer:
        """Have the editor write `text` as the whole of `path` (absolute, judged)."""
        ...

    def takes(self, path: str, *, write: bool) -> bool:
        """Whether the editor would take a read (or a write) of `path`, asked without I/O: an
        operation it would not take is done on the disk at once, its old text read once."""
        ...

    def runs_commands(self) -> bool:
        """Whether the editor runs commands in terminals of its own."""
        ...

    async def start_command(
        self, session_id: str, argv: Sequence[str], cwd: str, tool_call_id: str
    ) -> EditorAnswer:
        """Start `argv` in a new terminal for tool call `tool_call_id` (the editor may show the
        terminal in the call); its id as the answer's `text`."""
        ...

    async def wait_command(self, session_id: str, terminal_id: str) -> None:
        """Return once the terminal's command has ended (or the editor gave up answering)."""
        ...

    async def command_state(self, session_id: str, terminal_id: str) -> TerminalState:
        """The terminal's output so far and its exit."""
        ...

    async def end_command(self, session_id: str, terminal_id: str, *, kill: bool) -> None:
        """Kill the terminal's command first (with `kill`), then release the terminal."""
        ...
