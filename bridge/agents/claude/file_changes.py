"""Which of Claude Code's tool calls change which file: its `Edit` and `Write`, read off stream-json."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from bridge.agents.mapping import json_object
from bridge.agents.values import FileChangeAnnounced, FileChangeDone, Hunk

FILE_TOOLS: Final = frozenset({"Edit", "Write", "MultiEdit"})
_ASSISTANT: Final = b'{"type":"assistant"'
_USER: Final = b'{"type":"user"'


def hunks_of(structured: Any) -> tuple[Hunk, ...] | None:
    """Claude Code's `structuredPatch` as hunks; None if it is not one."""
    if not isinstance(structured, list) or not structured:
        return None
    hunks: list[Hunk] = []
    for raw in structured:
        if not isinstance(raw, dict):
            return None
        old_start, new_start, lines = raw.get("oldStart"), raw.get("newStart"), raw.get("lines")
        if not isinstance(old_start, int) or not isinstance(new_start, int) or not isinstance(lines, list):
            return None
        old: list[str] = []
        new: list[str] = []
        for line in lines:
            if not isinstance(line, str) or line[:1] not in (" ", "-", "+"):
                return None
            text = line[1:] + "\n"
            if line[0] in (" ", "-"):
                old.append(text)
            if line[0] in (" ", "+"):
                new.append(text)
        hunks.append(Hunk(old_start, new_start, tuple(old), tuple(new)))
    return tuple(hunks)


class ClaudeFileChangeWatch:
    """The `FileChangeWatch` of one Claude Code attempt in `cwd`."""

    # In `"type":"tool_use"` and `"type":"tool_result"` blocks; never in a text delta's frame.
    prefilter = b'"type":"tool_'

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._tools: dict[str, str] = {}

    def feed(self, line: bytes) -> Sequence[FileChangeAnnounced | FileChangeDone]:
        """Announcements at the assistant's tool_use block, reports at its tool_result."""
        if line.startswith(_ASSISTANT):
            return self._announce(json_object(line))
        if line.startswith(_USER) and self._tools:
            return self._done(json_object(line))
        return ()

    def _announce(self, event: dict[str, Any] | None) -> Sequence[FileChangeAnnounced]:
        message = event.get("message") if event else None
        content = message.get("content") if isinstance(message, dict) else None
        found: list[FileChangeAnnounced] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(call_id, str) or name not in FILE_TOOLS or call_id in self._tools:
                continue
            if not isinstance(arguments, dict) or not isinstance(arguments.get("file_path"), str):
                continue
            self._tools[call_id] = str(name)
            written = arguments.get("content") if name == "Write" else None
            path = os.path.normpath(os.path.join(self._cwd, os.path.expanduser(arguments["file_path"])))
            found.append(FileChangeAnnounced(call_id, path, written if isinstance(written, str) else None))
        return found

    def _done(self, event: dict[str, Any] | None) -> Sequence[FileChangeDone]:
        message = event.get("message") if event else None
        content = message.get("content") if isinstance(message, dict) else None
        result = event.get("tool_use_result") if event else None
        done: list[FileChangeDone] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or self._tools.pop(call_id, None) is None:
                continue
            patch = result.get("structuredPatch") if isinstance(result, dict) else None
            # No first line: a hunk starts with context lines; the capture finds the changed one.
            done.append(FileChangeDone(call_id, hunks_of(patch), None, *_original_of(result)))
        return done


def _original_of(result: Any) -> tuple[bool, str | None]:
    """What a Write's `tool_use_result` says the file held before: `originalFile` (null: created)."""
    if not isinstance(result, dict) or "originalFile" not in result:
        return False, None
    original = result["originalFile"]
    if original is None:
        return result.get("type") == "create", None
    return isinstance(original, str), original if isinstance(original, str) else None
