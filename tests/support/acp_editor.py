"""An ACP client that is an editor: it holds buffers (`fs/read_text_file`, `fs/write_text_file`)
and runs terminals (`terminal/create` and the rest) the way Zed does, recording every request.

Its buffers are its own: a write lands in `buffers`, never on the disk. Its terminals are
processes of their own session (a process group), killed whole by `terminal/kill`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError, schema

from tests.support.acp import AcpRecorder


@dataclass
class Terminal:
    """One terminal the client runs: its process and everything it printed."""

    command: str
    args: list[str]
    cwd: str | None
    process: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None
    killed: bool = False
    released: bool = False


class EditorRecorder(AcpRecorder):
    """An AcpRecorder that declares (and serves) `fs` and `terminal`."""

    def __init__(self) -> None:
        super().__init__()
        #: Open buffers: path -> text (unsaved: never written to the disk).
        self.buffers: dict[str, str] = {}
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.terminals: dict[str, Terminal] = {}
        #: Every terminal/* request, in order: (method, terminalId or command).
        self.terminal_calls: list[tuple[str, str]] = []

    @staticmethod
    def capabilities() -> schema.ClientCapabilities:
        """What this client declares in initialize."""
        fs = schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
        return schema.ClientCapabilities(fs=fs, terminal=True)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> schema.ReadTextFileResponse:
        self.reads.append(path)
        if path in self.buffers:
            return schema.ReadTextFileResponse(content=self.buffers[path])
        try:
            with open(path, encoding="utf-8") as handle:
                return schema.ReadTextFileResponse(content=handle.read())
        except OSError as exc:
            raise RequestError.resource_not_found(path) from exc

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content
        self._changed.set()
        return schema.WriteTextFileResponse()

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        env: list[schema.EnvVariable] | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> schema.CreateTerminalResponse:
        environ = {**os.environ, **{variable.name: variable.value for variable in env or []}}
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            env=environ,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        terminal_id = f"term-{len(self.terminals) + 1}"
        terminal = Terminal(command, list(args or []), cwd, process)
        terminal.reader = asyncio.get_running_loop().create_task(self._read(terminal))
        self.terminals[terminal_id] = terminal
        self.terminal_calls.append(("terminal/create", terminal_id))
        self._changed.set()
        return schema.CreateTerminalResponse(terminal_id=terminal_id)

    async def _read(self, terminal: Terminal) -> None:
        assert terminal.process.stdout is not None
        while chunk := await terminal.process.stdout.read(65536):
            terminal.output += chunk
            self._changed.set()

    def _terminal(self, method: str, terminal_id: str) -> Terminal:
        self.terminal_calls.append((method, terminal_id))
        self._changed.set()
        terminal = self.terminals.get(terminal_id)
        if terminal is None or terminal.released:
            raise RequestError.invalid_params({"terminalId": terminal_id})
        return terminal

    def _status(self, terminal: Terminal) -> schema.TerminalExitStatus | None:
        code = terminal.process.returncode
        if code is None:
            return None
        if code < 0:
            return schema.TerminalExitStatus(signal=signal.Signals(-code).name)
        return schema.TerminalExitStatus(exit_code=code)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.TerminalOutputResponse:
        terminal = self._terminal("terminal/output", terminal_id)
        if terminal.process.returncode is not None and terminal.reader is not None:
            await terminal.reader  # everything it printed before it ended
        text = terminal.output.decode("utf-8", "replace")
        return schema.TerminalOutputResponse(output=text, truncated=False, exit_status=self._status(terminal))

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.WaitForTerminalExitResponse:
        terminal = self._terminal("terminal/wait_for_exit", terminal_id)
        await terminal.process.wait()
        status = self._status(terminal)
        assert status is not None
        return schema.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.KillTerminalResponse:
        terminal = self._terminal("terminal/kill", terminal_id)
        terminal.killed = True
        self._kill(terminal)
        return schema.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.ReleaseTerminalResponse:
        terminal = self._terminal("terminal/release", terminal_id)
        self._kill(terminal)
        terminal.released = True
        return schema.ReleaseTerminalResponse()

    @staticmethod
    def _kill(terminal: Terminal) -> None:
        if terminal.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(terminal.process.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Kill what still runs (a test that failed half way)."""
        for terminal in self.terminals.values():
            self._kill(terminal)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(terminal.process.wait(), 5)

    def called(self, method: str) -> list[str]:
        """The terminal ids of every request of `method`."""
        return [terminal_id for name, terminal_id in self.terminal_calls if name == method]
