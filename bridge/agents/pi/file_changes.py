"""Which of pi's tool calls change which file: pi's `edit` and `write`, read off its event lines."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, Final

import orjson

from bridge.agents.mapping import json_object
from bridge.agents.values import FileChangeAnnounced, FileChangeDone, Hunk

FILE_TOOLS: Final = frozenset({"edit", "write"})

_UPDATE: Final = b'{"type":"message_update"'
_TOOLCALL_END: Final = b'"type":"toolcall_end"'
_EXECUTION_START: Final = b'{"type":"tool_execution_start"'
_EXECUTION_END: Final = b'{"type":"tool_execution_end"'
_UI_REQUEST: Final = b'{"type":"extension_ui_request"'
# The key of the extension's setStatus that tells what a write's file held (extension/index.ts).
ORIGINAL_KEY: Final = "pi-bridge:original"
_ORIGINAL_MARK: Final = b'"statusKey":"' + ORIGINAL_KEY.encode() + b'"'
# pi 1.6.0 puts `usage` before `assistantMessageEvent`: the event type still sits well within the head.
_HEAD: Final = 1024
_UNICODE_SPACES: Final = re.compile("[\u00a0\u2000-\u200a\u202f\u205f\u3000]")
_HUNK_HEADER: Final = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_NO_NEWLINE: Final = "\\ No newline at end of file"


def resolve_tool_path(path: str, cwd: str) -> str:
    """The absolute path pi's file tools use for `path` (path-utils.js resolveToCwd)."""
    normalized = _UNICODE_SPACES.sub(" ", path)
    if normalized.startswith("@"):
        normalized = normalized[1:]
    home = os.path.expanduser("~")
    if normalized == "~":
        normalized = home
    elif normalized.startswith("~/"):
        normalized = os.path.join(home, normalized[2:])
    return os.path.normpath(os.path.join(cwd, normalized))


def parse_unified_patch(patch: str) -> tuple[Hunk, ...] | None:
    """The hunks of a unified patch as jsdiff writes it; None if it is not one."""
    hunks: list[Hunk] = []
    old: list[str] = []
    new: list[str] = []
    starts: tuple[int, int] | None = None

    def close() -> None:
        if starts is not None:
            hunks.append(Hunk(starts[0], starts[1], tuple(old), tuple(new)))

    last: list[list[str]] = []  # the lists the previous line went to (for "No newline")
    for line in patch.split("\n"):
        header = _HUNK_HEADER.match(line)
        if header is not None:
            close()
            starts, old, new, last = (int(header.group(1)), int(header.group(2))), [], [], []
        elif starts is None or line == "":
            continue  # the "--- path" / "+++ path" header before the first hunk, or a blank line
        elif line == _NO_NEWLINE:
            for side in last:
                side[-1] = side[-1].removesuffix("\n")
        elif line[:1] in (" ", "-", "+"):
            text = line[1:] + "\n"
            last = {" ": [old, new], "-": [old], "+": [new]}[line[0]]
            for side in last:
                side.append(text)
        else:
            return None
    close()
    return tuple(hunks) if hunks else None


class PiFileChangeWatch:
    """The `FileChangeWatch` of one pi attempt in `cwd`."""

    # In "toolcall_end", "tool_execution_start" and "tool_execution_end"; in almost no text delta.
    prefilter = b'"tool'

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._announced: set[str] = set()
        self._tools: dict[str, str] = {}
        self._originals: dict[str, str | None] = {}

    def feed(self, line: bytes) -> Sequence[FileChangeAnnounced | FileChangeDone]:
        """Announcements at toolcall_end / tool_execution_start, reports at tool_execution_end."""
        if line.startswith(_UPDATE):
            if line.find(_TOOLCALL_END, 0, _HEAD) < 0:
                return ()
            event = json_object(line)
            update = event.get("assistantMessageEvent") if event else None
            call = update.get("toolCall") if isinstance(update, dict) else None
            if not isinstance(call, dict):
                return ()
            return self._announce(call.get("id"), call.get("name"), call.get("arguments"))
        if line.startswith(_EXECUTION_START):
            event = json_object(line)
            if event is None:
                return ()
            return self._announce(event.get("toolCallId"), event.get("toolName"), event.get("args"))
        if line.startswith(_EXECUTION_END):
            event = json_object(line)
            call_id = event.get("toolCallId") if event else None
            if not isinstance(call_id, str) or self._tools.pop(call_id, None) is None:
                return ()
            result = event.get("result") if event else None
            details = result.get("details") if isinstance(result, dict) else None
            return [_done(call_id, details, self._originals.pop(call_id, _UNTOLD))]
        if line.startswith(_UI_REQUEST) and _ORIGINAL_MARK in line:
            self._note_original(json_object(line))
        return ()

    def _note_original(self, event: dict[str, Any] | None) -> None:
        """Keep what the extension says an announced write's (or edit's) file held before it ran."""
        text = event.get("statusText") if event else None
        try:
            told = orjson.loads(text) if isinstance(text, str) else None
        except orjson.JSONDecodeError:
            return
        if not isinstance(told, dict):
            return
        call_id, exists, original = told.get("toolCallId"), told.get("exists"), told.get("text")
        if not isinstance(call_id, str) or self._tools.get(call_id) not in FILE_TOOLS:
            return
        if exists is False:
            self._originals[call_id] = None
        elif exists is True and isinstance(original, str):
            self._originals[call_id] = original

    def _announce(self, call_id: Any, name: Any, arguments: Any) -> Sequence[FileChangeAnnounced]:
        if not isinstance(call_id, str) or name not in FILE_TOOLS or call_id in self._announced:
            return ()
        if not isinstance(arguments, dict) or not isinstance(arguments.get("path"), str):
            return ()
        self._announced.add(call_id)
        self._tools[call_id] = str(name)
        content = arguments.get("content") if name == "write" else None
        path = resolve_tool_path(arguments["path"], self._cwd)
        return [FileChangeAnnounced(call_id, path, content if isinstance(content, str) else None)]


_UNTOLD: Final[Any] = object()


def _done(call_id: str, details: Any, original: Any = _UNTOLD) -> FileChangeDone:
    """The report of a call: pi's patch and first line, and what the extension said it held."""
    told = {"original_known": True, "original": original} if original is not _UNTOLD else {}
    if not isinstance(details, dict):
        return FileChangeDone(call_id, **told)
    patch = details.get("patch")
    first = details.get("firstChangedLine")
    return FileChangeDone(
        call_id,
        parse_unified_patch(patch) if isinstance(patch, str) else None,
        first if isinstance(first, int) and not isinstance(first, bool) and first >= 1 else None,
        **told,
    )
