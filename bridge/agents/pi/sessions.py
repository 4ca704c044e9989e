"""Read pi's session files (JSONL, pi's docs/session-format.md): the listing and one session's history."""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re
import stat
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

import orjson
from pydantic import ValidationError

from bridge.agents.pi.session_paths import cwd_folder, sessions_root
from bridge.agents.values import RunOptions, SessionCheckpoint
from bridge.contract import SessionHistory, SessionNotFound, SessionSummary
from bridge.process.spawn import environ_with

log = logging.getLogger(__name__)

TITLE_CHARS: Final = 80
#: Longest line parsed; a longer one (a tool call writing a huge file) is skipped.
MAX_LINE_BYTES: Final = 32 * 1024 * 1024
#: Each text of the history (prompt, assistant text, thought, tool output) is cut to this.
MAX_TEXT_CHARS: Final = 64 * 1024
#: Each string inside a tool call's arguments is cut to this.
MAX_ARGUMENT_CHARS: Final = 16 * 1024
#: The history keeps the last this many turns (`omittedTurns` counts the others).
MAX_TURNS: Final = 500
#: The listing looks for the first prompt in this many leading bytes of a file.
FIRST_PROMPT_SCAN_BYTES: Final = 4 * 1024 * 1024
CLIPPED: Final = "\n[… clipped by pi-bridge]"
NO_RESULT: Final = "the session holds no result of this tool call"

_CHUNK: Final = 1024 * 1024
_ORJSON_MAX_BYTES: Final = 256 * 1024
_MESSAGE_LINE: Final = b'\n{"type":"message"'
_INFO_LINE: Final = b'\n{"type":"session_info"'
# pi writes every entry as {"type":..,"id":..,"parentId":..}: the tree is read off line heads.
_HEAD_BYTES: Final = 512
_IDS: Final = re.compile(rb'^\{"type":"[a-z_]+","id":"([^"\\]+)","parentId":(?:null|"([^"\\]+)")')


# ------------------------------------------------------------------------------------ lines


def _lines(stream: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Complete lines (without newline) up to `max_bytes`; longer ones are skipped whole."""
    while True:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        if len(line) > max_bytes and not line.endswith(b"\n"):
            log.info("session line over %d bytes skipped", max_bytes)
            while (rest := stream.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            continue
        yield line.rstrip(b"\r\n")


def _parse(line: bytes) -> dict[str, Any] | None:
    """One entry, or None for a line that is not a JSON object (garbage, half-written)."""
    if not line.strip():
        return None
    try:
        # orjson's parser takes many times a line's size in working memory, the stdlib's far less: long
        # lines (a big tool output) go to the stdlib so a huge session stays bounded.
        entry = orjson.loads(line) if len(line) < _ORJSON_MAX_BYTES else json.loads(line)
    except (orjson.JSONDecodeError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _read_header(stream: IO[bytes]) -> dict[str, Any] | None:
    """The session header, if the file starts with one (else it is not a pi session)."""
    first = stream.readline(64 * 1024)
    header = _parse(first.rstrip(b"\r\n"))
    if header is None or header.get("type") != "session" or not isinstance(header.get("id"), str):
        return None
    return header


# ------------------------------------------------------------------------------------ text


def _clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + CLIPPED


def _clip_value(value: Any) -> Any:
    """Tool-call arguments with every long string cut (a write of a big file stays bounded)."""
    if isinstance(value, str):
        return _clip(value, MAX_ARGUMENT_CHARS)
    if isinstance(value, dict):
        return {key: _clip_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip_value(item) for item in value]
    return value


def _parts_text(content: Any, part_type: str = "text", key: str = "text") -> str:
    """The `key` of every `part_type` part of a pi content list (or a plain string), clipped."""
    if isinstance(content, str):
        return _clip(content) if part_type == "text" else ""
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    size = 0
    for part in content:
        if isinstance(part, dict) and part.get("type") == part_type and isinstance(part.get(key), str):
            texts.append(part[key])
            size += len(part[key])
            if size > MAX_TEXT_CHARS:
                break
    return _clip("".join(texts))


def _iso_mtime(path: Path) -> str:
    stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------------ listing


def _count_and_name(stream: IO[bytes]) -> tuple[int, str | None]:
    """(message entries, latest session name) by a byte scan; only session_info lines are parsed.

    The stream must stand on a newline (the header's): entries are counted by their line start.
    """
    count = 0
    name: str | None = None
    carry = b""
    while True:
        data = stream.read(_CHUNK)
        buffer = carry + data
        cut = buffer.rfind(b"\n") if data else len(buffer)
        complete, carry = (buffer[:cut], buffer[cut:]) if cut >= 0 else (b"", buffer)
        count += complete.count(_MESSAGE_LINE)
        start = complete.find(_INFO_LINE)
        while start >= 0:
            end = complete.find(b"\n", start + 1)
            info = _parse(complete[start + 1 : end if end >= 0 else len(complete)])
            if info is not None:
                name = _name_of(info)
            start = complete.find(_INFO_LINE, start + 1)
        if not data:
            return count, name
        if len(carry) > _HEAD_BYTES:
            carry = carry[:_HEAD_BYTES]  # the rest of one long line: only its start matters


def _first_prompt(stream: IO[bytes]) -> str:
    """The text of the first user message within the first `FIRST_PROMPT_SCAN_BYTES`."""
    start = stream.tell()
    for line in _lines(stream, FIRST_PROMPT_SCAN_BYTES):
        if stream.tell() - start > FIRST_PROMPT_SCAN_BYTES:
            break
        entry = _parse(line)
        message = entry.get("message") if entry is not None and entry.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "user":
            text = _parts_text(message.get("content"))
            if text:
                return text
    return ""


def _name_of(info: dict[str, Any]) -> str | None:
    """The name a session_info entry sets (the latest wins; an empty one clears it)."""
    value = info.get("name")
    return value.strip() or None if isinstance(value, str) else None


def title_of(name: str | None, first_prompt: str) -> str:
    """The session's name if it has one, else its first prompt cut to 80 characters."""
    if name:
        return name
    prompt = " ".join(first_prompt.split())
    return prompt if len(prompt) <= TITLE_CHARS else prompt[: TITLE_CHARS - 1] + "…"


def summarize(path: Path) -> SessionSummary | None:
    """One file's listing entry; None for a foreign or unreadable file."""
    try:
        with path.open("rb") as stream:
            header = _read_header(stream)
            if header is None:
                return None
            body_start = stream.tell()
            prompt = _first_prompt(stream)
            stream.seek(body_start - 1)  # the header's newline: the scan counts line starts
            count, name = _count_and_name(stream)
            updated = _iso_mtime(path)
    except OSError as exc:
        log.info("session file %s unreadable: %s", path, exc)
        return None
    created = header.get("timestamp")
    try:
        return SessionSummary(
            session_id=header["id"],
            cwd=str(header.get("cwd", "")),
            title=title_of(name, prompt),
            created_at=created if isinstance(created, str) else updated,
            updated_at=updated,
            message_count=count,
        )
    except ValidationError as exc:  # a header no pi writes: skip the file, not the listing
        log.info("session file %s skipped: %s", path, exc)
        return None


def _session_files(folder: Path) -> list[tuple[float, Path]]:
    """The folder's .jsonl files with their mtimes, newest first (vanished ones dropped)."""
    files: list[tuple[float, Path]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.endswith(".jsonl"):
            continue
        try:
            if entry.is_file():
                files.append((entry.stat().st_mtime, Path(entry.path)))
        except OSError:
            continue
    files.sort(key=lambda item: item[0], reverse=True)
    return files


def list_sessions(cwd: str, limit: int, env: Mapping[str, str]) -> list[SessionSummary]:
    """The sessions of `cwd`, newest first, at most `limit`; bad files are skipped."""
    root, flat = sessions_root(environ_with(env))
    folder = root if flat else root / cwd_folder(cwd)
    sessions: list[SessionSummary] = []
    for _, path in _session_files(folder):
        summary = summarize(path)
        # Folder names are lossy (/a-b and /a/b share one), and a flat folder holds every cwd.
        if summary is not None and summary.cwd == cwd:
            sessions.append(summary)
            if len(sessions) >= limit:
                break
    return sessions


# ------------------------------------------------------------------------------------ retry


def checkpoint(options: RunOptions, env: Mapping[str, str]) -> SessionCheckpoint | None:
    """Where the session a run continues stands now: the file pi will open and its size.

    pi opens `--session` as a path when it looks like one (relative to its cwd), else the session
    whose id is or starts with it, looked for among the cwd's sessions first, and `--continue` the
    newest of the cwd (by file name, as `latest_session_id`). A prefix that several files share
    is pi's to resolve: None then.
    """
    root, flat = sessions_root(environ_with(env))
    session_id = options.session_id
    if session_id and ("/" in session_id or "\\" in session_id or session_id.endswith(".jsonl")):
        path = Path(options.cwd, session_id)
        return _checkpoint_of(path) if path.is_file() else None
    if session_id:
        pattern = f"*_{glob.escape(session_id)}*.jsonl"
        local = [] if flat else sorted((root / cwd_folder(options.cwd)).glob(pattern))
        matches = local or sorted(root.glob(pattern if flat else f"*/{pattern}"))
        exact = [path for path in matches if path.stem.split("_", 1)[-1] == session_id]
        found = exact or matches
        if len(found) > 1:
            return None
        return _checkpoint_of(found[0]) if found else SessionCheckpoint(session_id)
    if options.continue_session:
        folder = root if flat else root / cwd_folder(options.cwd)
        newest = sorted(folder.glob("*_*.jsonl"))[-1:] if folder.is_dir() else []
        return _checkpoint_of(newest[0]) if newest else SessionCheckpoint(None)
    return SessionCheckpoint(None)


def _checkpoint_of(path: Path) -> SessionCheckpoint | None:
    """A session file's id (from its header) and size; None if it is not a readable pi session."""
    try:
        with path.open("rb") as stream:
            header = _read_header(stream)
            size = os.fstat(stream.fileno()).st_size
    except OSError:
        return None
    return SessionCheckpoint(header["id"], str(path), size) if header is not None else None


# ------------------------------------------------------------------------------------ history


def find_session_file(session_id: str, env: Mapping[str, str]) -> Path | None:
    """The file of the session with exactly this id (pi names it `<timestamp>_<id>.jsonl`)."""
    if not session_id or "/" in session_id or "\\" in session_id or session_id.startswith("."):
        return None
    root, flat = sessions_root(environ_with(env))
    pattern = f"*_{glob.escape(session_id)}.jsonl"
    matches = sorted(root.glob(pattern if flat else f"*/{pattern}"))
    for path in matches:
        try:
            with path.open("rb") as stream:
                header = _read_header(stream)
        except OSError:
            continue
        if header is not None and header["id"] == session_id:
            return path
    return None


def _active_path(stream: IO[bytes]) -> set[str] | None:
    """Ids of the entries on the branch that ends at the last entry; None when the file is linear.

    pi branches in place (`/tree`): entries form a tree and the conversation shown is the path from
    the leaf (the last entry written) to the root. Read off the line heads only; a file whose
    entries are not all in pi's key order is read as linear (every entry shown).
    """
    parents: dict[str, str | None] = {}
    previous: str | None = None
    linear = True
    leaf: str | None = None
    for head in _line_heads(stream):
        match = _IDS.match(head)
        if match is None:
            if head.startswith(b'{"type":"'):
                return None  # a whole entry of another shape: the tree cannot be trusted
            continue
        entry_id = match.group(1).decode()
        parent = match.group(2).decode() if match.group(2) else None
        if parent != previous:
            linear = False
        parents[entry_id] = parent
        previous = leaf = entry_id
    if linear:
        return None
    path: set[str] = set()
    node = leaf
    while node is not None and node not in path:
        path.add(node)
        node = parents.get(node)
    return path


def _line_heads(stream: IO[bytes]) -> Iterator[bytes]:
    """The first `_HEAD_BYTES` of every line, reading in chunks (a huge line is never held)."""
    head = b""
    while data := stream.read(_CHUNK):
        position = 0
        while position < len(data):
            newline = data.find(b"\n", position)
            end = len(data) if newline < 0 else newline
            if len(head) < _HEAD_BYTES:
                head += data[position : min(end, position + _HEAD_BYTES - len(head))]
            if newline < 0:
                break
            yield head
            head = b""
            position = newline + 1
    if head:
        yield head


@dataclass(slots=True)
class _Turn:
    prompt: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    open_calls: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def close(self) -> dict[str, Any]:
        """The turn as the wire has it; a call without a result is closed as failed."""
        for call_id, (name, arguments) in self.open_calls.items():
            self.messages.append(_tool_call(call_id, name, arguments))
            self.messages.append(
                {"type": "tool.failed", "content": {"toolCallId": call_id, "name": name, "error": NO_RESULT}}
            )
        self.open_calls.clear()
        return {"prompt": self.prompt, "messages": self.messages}


def _tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = _clip_value(arguments) if isinstance(arguments, dict) else {}
    return {"type": "tool.call", "content": {"toolCallId": call_id, "name": name, "arguments": args}}


def _on_assistant(turn: _Turn, message: dict[str, Any]) -> None:
    content = message.get("content")
    text = _parts_text(content)
    if text:
        turn.messages.append({"type": "assistant", "content": {"text": text}})
    thought = _parts_text(content, "thinking", "thinking")
    if thought:
        turn.messages.append({"type": "assistant.thought", "content": {"text": thought}})
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "toolCall" and isinstance(part.get("id"), str):
            turn.open_calls[part["id"]] = (str(part.get("name", "")), part.get("arguments"))


def _on_tool_result(turn: _Turn, message: dict[str, Any]) -> None:
    call_id = str(message.get("toolCallId", ""))
    name, arguments = turn.open_calls.pop(call_id, (str(message.get("toolName", "")), {}))
    turn.messages.append(_tool_call(call_id, name, arguments))
    output = _parts_text(message.get("content"))
    if message.get("isError") is True:
        turn.messages.append(
            {"type": "tool.failed", "content": {"toolCallId": call_id, "name": name, "error": output}}
        )
        return
    result: dict[str, Any] = {"toolCallId": call_id, "name": name, "output": output}
    details = message.get("details")
    if isinstance(details, dict):
        if details.get("truncation"):
            result["truncated"] = True
        if isinstance(details.get("fullOutputPath"), str):
            result["fullOutputPath"] = details["fullOutputPath"]
    turn.messages.append({"type": "tool.completed", "content": result})


def _kept_entries(stream: IO[bytes], active: set[str] | None) -> Iterator[dict[str, Any]]:
    """The session's name entries and the messages on its active branch, each message a dict."""
    for line in _lines(stream):
        entry = _parse(line)
        if entry is None:
            continue
        kind = entry.get("type")
        if kind == "session_info" or (
            kind == "message"
            and (active is None or entry.get("id") in active)
            and isinstance(entry.get("message"), dict)
        ):
            yield entry


@dataclass
class _Turns:
    """The turns read from a session's entries, the last MAX_TURNS of them kept."""

    kept: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_TURNS))
    total: int = 0
    name: str | None = None
    first_prompt: str = ""


def _turns_of(entries: Iterator[dict[str, Any]]) -> _Turns:
    turns = _Turns()
    turn: _Turn | None = None
    for entry in entries:
        if entry.get("type") == "session_info":
            turns.name = _name_of(entry)
            continue
        message = entry["message"]
        role = message.get("role")
        if role == "user":
            if turn is not None:
                turns.kept.append(turn.close())
            turn = _Turn(_parts_text(message.get("content")))
            turns.total += 1
            turns.first_prompt = turns.first_prompt or turn.prompt
        elif turn is None:
            continue  # the system message before the first prompt
        elif role == "assistant":
            _on_assistant(turn, message)
        elif role == "toolResult":
            _on_tool_result(turn, message)
    if turn is not None:
        turns.kept.append(turn.close())
    return turns


def read_history(path: Path) -> SessionHistory | None:
    """The turns of one session file; None if it is not a pi session."""
    with path.open("rb") as stream:
        header = _read_header(stream)
        if header is None:
            return None
        body_start = stream.tell()
        active = _active_path(stream)
        stream.seek(body_start)
        turns = _turns_of(_kept_entries(stream, active))
    history = SessionHistory.model_validate(
        {
            "sessionId": header["id"],
            "cwd": str(header.get("cwd", "")),
            "title": title_of(turns.name, turns.first_prompt),
            "turns": list(turns.kept),
        }
    )
    if turns.total > len(turns.kept):
        history = history.model_copy(update={"omitted_turns": turns.total - len(turns.kept)})
    return history


def read_session(session_id: str, env: Mapping[str, str]) -> SessionHistory | SessionNotFound:
    """One session's history by id, or `found: false`."""
    path = find_session_file(session_id, env)
    history = None
    if path is not None:
        try:
            history = read_history(path)
        except (OSError, ValidationError) as exc:
            log.info("session file %s unreadable: %s", path, exc)
    return history if history is not None else SessionNotFound(session_id=session_id)


def session_file_size(path: str | None) -> int | None:
    """The size of a session file now (None when pi has not written it yet)."""
    if not path:
        return None
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def trim_session_file(path: str, size: int | None) -> None:
    """Cut a session file back to `size` bytes (its state before a failed prompt); blocking I/O.

    pi appends entries, so the bytes before `size` are exactly the conversation before the
    prompt; a file pi had not written yet keeps only its header line (the session itself). Only
    a regular file is touched: the path is pi's to name, and a FIFO's open would wait forever.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return
    with open(fd, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        if size is None:
            header = handle.readline()
            size = len(header) if header.endswith(b"\n") else 0
        if size < os.fstat(fd).st_size:
            os.ftruncate(fd, size)


def rewind(
    checkpoint: SessionCheckpoint, announced: str | None, options: RunOptions, env: Mapping[str, str]
) -> RunOptions:
    """Cut the session file back to the checkpoint (pi appends, so no earlier turn is touched).

    A session the run started keeps its header line only, and the next attempt resumes it:
    `--session` of an id pi has no file for fails ("No session found matching").
    """
    if checkpoint.path is not None:
        trim_session_file(checkpoint.path, checkpoint.size)
        return options
    started = find_session_file(announced, env) if announced else None
    if started is None:
        return options  # nothing stored: the next attempt starts a session of its own
    trim_session_file(str(started), None)
    return dataclasses.replace(options, session_id=announced, continue_session=False, resumed=False)
