"""The LSP client as the agent's editor: the documents it has open, and `workspace/applyEdit`.

The server keeps the text of every document the client opened (`textDocument/didOpen`,
`didChange`, `didClose`: pygls's workspace). A read of an open document answers that text, what
the user sees, unsaved changes included. A write to an open document goes through
`workspace/applyEdit` (the whole document replaced) when the client declared it applies edits:
the user's buffer takes it, undoable, and nothing lands on the disk behind it; a client that
refuses it fails the tool with its reason. A document that is not open, or a client that applies
no edits: the disk, as before (bridge/editor/editor_files.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument, Workspace

from bridge.editor.editor_files import NOT_THE_EDITORS, EditorAnswer, TerminalState
from bridge.fronts.lsp.client_requests import ClientRequests

#: The label the client may show for the agent's edit (VS Code: in its undo history).
EDIT_LABEL = "pi-bridge: the agent's write"


class LspEditor:
    """Reads open documents, and writes them through `workspace/applyEdit` when it may."""

    def __init__(
        self, client: ClientRequests, workspace: Callable[[], Workspace], *, applies_edits: bool
    ) -> None:
        self._client = client
        self._workspace = workspace
        self._applies_edits = applies_edits

    def _document(self, path: str) -> TextDocument | None:
        uri = from_fs_path(path)
        if uri is None:
            return None
        documents: dict[str, TextDocument] = self._workspace().text_documents
        return documents.get(uri)

    async def read_text(self, session_id: str, path: str) -> EditorAnswer:
        document = self._document(path)
        if document is None:
            return NOT_THE_EDITORS
        return EditorAnswer(taken=True, text=document.source)

    async def write_text(self, session_id: str, path: str, text: str) -> EditorAnswer:
        document = self._document(path) if self._applies_edits else None
        if document is None:
            return NOT_THE_EDITORS
        edit = whole_document_edit(document, text)
        answer: Any = await self._client.send(types.WORKSPACE_APPLY_EDIT, edit)
        if not isinstance(answer, dict):
            return EditorAnswer(taken=True, error=f"the editor did not apply the write to {path}: no answer")
        if answer.get("applied") is not True:
            reason = answer.get("failureReason")
            why = reason if isinstance(reason, str) and reason else "the user or the editor refused it"
            return EditorAnswer(taken=True, error=f"the editor did not apply the write to {path}: {why}")
        return EditorAnswer(taken=True)

    def takes(self, path: str, *, write: bool) -> bool:
        return (self._applies_edits or not write) and self._document(path) is not None

    def runs_commands(self) -> bool:
        return False

    async def start_command(
        self, session_id: str, argv: Sequence[str], cwd: str, tool_call_id: str
    ) -> EditorAnswer:
        return NOT_THE_EDITORS

    async def wait_command(self, session_id: str, terminal_id: str) -> None:
        return None

    async def command_state(self, session_id: str, terminal_id: str) -> TerminalState:
        return TerminalState(error="the LSP client runs no terminals")

    async def end_command(self, session_id: str, terminal_id: str, *, kill: bool) -> None:
        return None


def whole_document_edit(document: TextDocument, text: str) -> dict[str, Any]:
    """`workspace/applyEdit` params replacing the whole of `document` (at the version the server
    holds, so a client whose buffer moved on refuses it) with `text`."""
    lines = document.lines
    last = len(lines) - 1 if lines else 0
    tail = lines[last] if lines else ""
    end_line, end_character = (last + 1, 0) if tail.endswith("\n") else (last, 0)
    if not tail.endswith("\n"):
        end_character = document.position_codec.client_num_units(tail)
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": end_line, "character": end_character}}
    change = {
        "textDocument": {"uri": document.uri, "version": document.version},
        "edits": [{"range": whole, "newText": text}],
    }
    return {"label": EDIT_LABEL, "edit": {"documentChanges": [change]}}
