"""The agent's shell commands in the editor's own terminal (ACP's `terminal/create`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio

from bridge.agents.values import FileOp, FileOpResult
from bridge.editor.editor_files import EditorFiles
from bridge.engines.cancel import CancelToken

#: How long one poll waits for the command to end before answering its output so far.
POLL_SECONDS: Final = 0.25
#: How the run's sandbox confines one command: its argv, or why it cannot run (a str).
Confine = Callable[[str], Sequence[str] | str]


class EditorCommands:
    """One run's commands in the editor's terminals."""

    def __init__(self, editor: EditorFiles, cancel: CancelToken, confine: Confine) -> None:
        self._editor = editor
        self._cancel = cancel
        self._confine = confine
        #: The run's live terminals, by id.
        self._live: set[str] = set()

    async def do(self, session_id: str, op: FileOp) -> FileOpResult:
        """Answer one `exec`, `poll` or `kill` of the agent's shell tool."""
        if op.op == "exec":
            return await self._exec(session_id, op)
        terminal_id = op.terminal_id or ""
        if terminal_id not in self._live:
            return FileOpResult(error=f"refused: no terminal {terminal_id!r} of this run")
        if op.op == "kill":
            await self._end(session_id, terminal_id, kill=True)
            return FileOpResult(done=True)
        return await self._poll(session_id, terminal_id)

    async def _exec(self, session_id: str, op: FileOp) -> FileOpResult:
        if not self._editor.runs_commands():
            return FileOpResult(local=True)
        if self._cancel.cancelled:
            return FileOpResult(error="cancelled: the run was cancelled")
        argv = self._confine(op.command or "")
        if isinstance(argv, str):
            return FileOpResult(error=argv)
        started = await self._editor.start_command(session_id, argv, op.path, op.tool_call_id)
        if started.error is not None or started.text is None:
            return FileOpResult(error=started.error or "the editor started no terminal")
        self._live.add(started.text)
        if self._cancel.cancelled:  # cancelled while the editor started it
            await self._end(session_id, started.text, kill=True)
            return FileOpResult(error="cancelled: the run was cancelled")
        return FileOpResult(terminal_id=started.text)

    async def _poll(self, session_id: str, terminal_id: str) -> FileOpResult:
        """Wait up to POLL_SECONDS for the command's end (or the run's cancel); its state then."""
        with anyio.move_on_after(POLL_SECONDS):
            async with anyio.create_task_group() as group:

                async def first(wait: Callable[[], Awaitable[object]]) -> None:
                    await wait()
                    group.cancel_scope.cancel()

                group.start_soon(first, lambda: self._editor.wait_command(session_id, terminal_id))
                group.start_soon(first, self._cancel.wait)
        if self._cancel.cancelled:
            await self._end(session_id, terminal_id, kill=True)
            return FileOpResult(error="cancelled: the run was cancelled", done=True)
        state = await self._editor.command_state(session_id, terminal_id)
        if state.error is not None:
            await self._end(session_id, terminal_id, kill=True)
            return FileOpResult(error=state.error, done=True)
        if not state.exited:
            return FileOpResult(terminal_id=terminal_id, output=state.output)
        await self._end(session_id, terminal_id, kill=False)
        code, signal, output = state.exit_code, state.signal, state.output
        return FileOpResult(terminal_id=terminal_id, output=output, done=True, exit_code=code, signal=signal)

    async def _end(self, session_id: str, terminal_id: str, *, kill: bool) -> None:
        """Kill (if asked) and release one terminal, whatever cancels the caller."""
        if terminal_id not in self._live:
            return
        self._live.discard(terminal_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await self._editor.end_command(session_id, terminal_id, kill=kill)
