"""The ACP client as the agent's editor: `fs/read_text_file` and `fs/write_text_file`.

A client that declares `fs.readTextFile` is asked for every read the path policy allowed (so
the agent sees its unsaved buffers); one that declares `fs.writeTextFile` gets every allowed
write (so its review shows it, and nothing lands on the disk behind it). A client that declares
neither: the operation is the disk's (bridge/runs/editor_files.py). The client's answer is
hostile input: anything but a valid answer is the tool's error, never a silent disk fallback.
"""

from __future__ import annotations

from typing import Final

from acp import schema
from pydantic import ValidationError

from bridge.fronts.acp.client_requests import ClientRequests
from bridge.runs.editor_files import NOT_THE_EDITORS, EditorAnswer

READ_TEXT_FILE: Final = "fs/read_text_file"
WRITE_TEXT_FILE: Final = "fs/write_text_file"


class AcpEditor:
    """Reads and writes through the client, as far as it declared it can."""

    def __init__(self, client: ClientRequests) -> None:
        self._client = client

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
