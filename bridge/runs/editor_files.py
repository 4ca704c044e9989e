"""The editor's own file surface: a read or a write of the agent's file tools done by the editor.

A front whose client can do it (ACP's `fs/read_text_file` and `fs/write_text_file`, the LSP
front's open documents and `workspace/applyEdit`) implements `EditorFiles` and the gate hands it
to every run's file operations (file_ops.py). The path policy judges each operation first; only
an allowed one reaches the editor. So a read sees the text the user sees (an unsaved buffer),
and a write goes through the editor's own review, nothing landing on the disk behind it.

An operation the editor does not take (`NOT_THE_EDITORS`) is done on the disk as without one.
"""

from __future__ import annotations

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


class EditorFiles(Protocol):
    """A front's editor, which may read and write the files of a session's agent."""

    async def read_text(self, session_id: str, path: str) -> EditorAnswer:
        """The text the editor holds for `path` (absolute, judged by the policy)."""
        ...

    async def write_text(self, session_id: str, path: str, text: str) -> EditorAnswer:
        """Have the editor write `text` as the whole of `path` (absolute, judged)."""
        ...
