"""The ACP client as the agent's editor: `fs/read_text_file`, `fs/write_text_file`, `terminal/*`.

A client that declares `fs.readTextFile` is asked for every read the path policy allowed (so
the agent sees its unsaved buffers); one that declares `fs.writeTextFile` gets every allowed
write (so its review shows it, and nothing lands on the disk behind it). A client that declares
neither: the operation is the disk's (bridge/editor/editor_files.py). The client's answer is
hostile input: anything but a valid answer is the tool's error, never a silent disk fallback.

A client that declares `terminal` runs the agent's commands (bridge/editor/editor_commands.py
decides what runs and when it ends; this module only speaks the protocol).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from acp import schema
from pydantic import ValidationError

from bridge.editor.editor_files import NOT_THE_EDITORS, EditorAnswer, TerminalState
from bridge.fronts.acp.client_requests import ClientRequests

READ_TEXT_FILE: Final = "fs/read_text_file"
WRITE_TEXT_FILE: Final = "fs/write_text_file"
#: Shows a terminal in its tool call: (session id, tool call id, terminal id).
ShowTerminal = Callable[[str, str, str], None]
#: The most output a terminal keeps (its tail), as pi's bash tool keeps.
OUTPUT_BYTE_LIMIT: Final = 50 * 1024


class AcpEditor:
    """Reads and writes through the client, as far as it declared it can."""

    def __init__(self, client: ClientRequests, show: ShowTerminal = lambda *_: None) -> None:
        self._client = client
        self._show = show

    async def read_text(self, session_id: str, path: str) -> EditorAnswer:
        if not self._client.answers.read_text_file:
            return NOT_THE_EDITORS
        reply = await self._client.call(session_id, READ_TEXT_FILE, {"sessionId": session_id, "path": path})
        if reply.error is not None:
            return EditorAnswer(taken=True, error=f"the editor could not read {path}: {reply.error}")
        try:
            text = schema.ReadTextFileResponse.model_validate(reply.result).content
            return EditorAnswer(taken=True, text=text)
        except ValidationError:
            return EditorAnswer(taken=True, error=f"the editor's answer for {path} is not a text")

    async def write_text(self, session_id: str, path: str, text: str) -> EditorAnswer:
        if not self._client.answers.write_text_file:
            return NOT_THE_EDITORS
        params = {"sessionId": session_id, "path": path, "content": text}
        reply = await self._client.call(session_id, WRITE_TEXT_FILE, params)
        if reply.error is not None:
            return EditorAnswer(taken=True, error=f"the editor did not write {path}: {reply.error}")
        return EditorAnswer(taken=True)

    def takes(self, path: str, *, write: bool) -> bool:
        answers = self._client.answers
        return answers.write_text_file if write else answers.read_text_file

    def runs_commands(self) -> bool:
        return self._client.answers.terminal

    async def start_command(
        self, session_id: str, argv: Sequence[str], cwd: str, tool_call_id: str
    ) -> EditorAnswer:
        params = {
            "sessionId": session_id,
            "command": argv[0],
            "args": list(argv[1:]),
            "cwd": cwd,
            "outputByteLimit": OUTPUT_BYTE_LIMIT,
        }
        reply = await self._client.call(session_id, "terminal/create", params)
        try:
            started = schema.CreateTerminalResponse.model_validate(reply.result)
        except ValidationError:
            return EditorAnswer(taken=True, error=f"the editor started no terminal: {reply.error or 'no id'}")
        self._show(session_id, tool_call_id, started.terminal_id)
        return EditorAnswer(taken=True, text=started.terminal_id)

    async def wait_command(self, session_id: str, terminal_id: str) -> None:
        params = {"sessionId": session_id, "terminalId": terminal_id}
        await self._client.call(session_id, "terminal/wait_for_exit", params)

    async def command_state(self, session_id: str, terminal_id: str) -> TerminalState:
        params = {"sessionId": session_id, "terminalId": terminal_id}
        reply = await self._client.call(session_id, "terminal/output", params)
        try:
            answer = schema.TerminalOutputResponse.model_validate(reply.result)
        except ValidationError:
            return TerminalState(error=f"the editor's terminal did not answer: {reply.error or 'no output'}")
        status = answer.exit_status
        if status is None:
            return TerminalState(output=answer.output)
        return TerminalState(answer.output, exited=True, exit_code=status.exit_code, signal=status.signal)

    async def end_command(self, session_id: str, terminal_id: str, *, kill: bool) -> None:
        params = {"sessionId": session_id, "terminalId": terminal_id}
        if kill:
            await self._client.call(session_id, "terminal/kill", params)
        await self._client.call(session_id, "terminal/release", params)
