"""Diff capture on pi 1.6.0's event lines: snapshots in time, and right answers when the race is lost."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.agents.claude.file_changes import ClaudeFileChangeWatch
from bridge.agents.pi.file_changes import PiFileChangeWatch, parse_unified_patch, resolve_tool_path
from bridge.agents.values import Out
from bridge.engines import diff_capture
from bridge.engines.diff_capture import (
    MAX_READS,
    DiffCapture,
    FileState,
    first_changed_line,
    read_now,
    read_state,
)

# The shapes pi 1.6.0 prints (usage before assistantMessageEvent; details of edit as captured).
PATCH = "--- notes.txt\n+++ notes.txt\n@@ -1,3 +1,3 @@\n line one\n-line two\n+line 2, edited\n line three\n"
BEFORE = "line one\nline two\nline three\n"
AFTER = "line one\nline 2, edited\nline three\n"


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def toolcall_end(call_id: str, name: str, arguments: dict[str, Any]) -> bytes:
    return line(
        {"type": "message_update", "usage": {"input": 11, "output": 7},
         "assistantMessageEvent": {"type": "toolcall_end", "contentIndex": 1,
                                   "toolCall": {"type": "toolCall", "id": call_id, "name": name,
                                                "arguments": arguments}}}
    )  # fmt: skip


def execution_start(call_id: str, name: str, arguments: dict[str, Any]) -> bytes:
    return line({"type": "tool_execution_start", "toolCallId": call_id, "toolName": name, "args": arguments})


def execution_end(call_id: str, name: str, details: dict[str, Any] | None) -> bytes:
    result: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}]}
    if details is not None:
        result["details"] = details
    return line(
        {
            "type": "tool_execution_end",
            "toolCallId": call_id,
            "toolName": name,
            "result": result,
            "isError": False,
        }
    )


EDIT_ARGS = {"path": "notes.txt", "edits": [{"oldText": "line two", "newText": "line 2, edited"}]}
EDIT_DETAILS = {"diff": "(display diff)", "patch": PATCH, "firstChangedLine": 2}


class Capture:
    """A DiffCapture that reads in the call: each test times its writes around the snapshot."""

    def __init__(self, cwd: Path) -> None:
        self.sent: list[Out] = []
        self.capture = DiffCapture(PiFileChangeWatch(str(cwd)), self.sent.extend, start_read=read_now)

    def note_line(self, line: bytes) -> None:
        self.capture.note_line(line)

    def observe(self, outs: list[Out]) -> list[Out]:
        """The messages as sent, each tool.completed with its diff."""
        self.sent.clear()
        self.capture.send(outs)
        return list(self.sent)


def completed(call_id: str, name: str) -> Out:
    return Out("tool.completed", {"toolCallId": call_id, "name": name, "output": "ok"})


def run_edit(
    tmp_path: Path, *, edit_before_snapshot: bool, edit_again_before_end: bool = False
) -> dict[str, Any]:
    target = tmp_path / "notes.txt"
    target.write_text(BEFORE)
    capture = Capture(tmp_path)
    if edit_before_snapshot:
        target.write_text(AFTER)  # pi was faster than the bridge's read of its stdout
    capture.note_line(toolcall_end("c1", "edit", EDIT_ARGS))
    if not edit_before_snapshot:
        target.write_text(AFTER)
    capture.note_line(execution_start("c1", "edit", EDIT_ARGS))
    capture.note_line(execution_end("c1", "edit", EDIT_DETAILS))
    if edit_again_before_end:
        target.write_text(AFTER + "a later tool appended this\n")
    (out,) = capture.observe([completed("c1", "edit")])
    diff: dict[str, Any] = out.content["diff"]
    return diff


def test_an_edit_snapshotted_in_time(tmp_path: Path) -> None:
    diff = run_edit(tmp_path, edit_before_snapshot=False)
    assert diff == {"path": str(tmp_path / "notes.txt"), "oldText": BEFORE, "newText": AFTER, "line": 2}


def test_an_edit_snapshotted_too_late_is_reconstructed_from_pi_s_patch(tmp_path: Path) -> None:
    diff = run_edit(tmp_path, edit_before_snapshot=True)
    assert diff == {"path": str(tmp_path / "notes.txt"), "oldText": BEFORE, "newText": AFTER, "line": 2}


def test_an_edit_whose_file_changed_again_before_its_end_was_read(tmp_path: Path) -> None:
    diff = run_edit(tmp_path, edit_before_snapshot=False, edit_again_before_end=True)
    assert diff["oldText"] == BEFORE and diff["newText"] == AFTER


def test_a_write_snapshotted_too_late_leaves_old_text_out_rather_than_guess(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    capture = Capture(tmp_path)
    target.write_text("content\n")  # written before the bridge read toolcall_end
    capture.note_line(toolcall_end("w1", "write", {"path": "new.txt", "content": "content\n"}))
    capture.note_line(execution_end("w1", "write", None))
    (out,) = capture.observe([completed("w1", "write")])
    assert out.content["diff"] == {"path": str(target), "newText": "content\n"}


def told_original(call_id: str, told: dict[str, Any]) -> bytes:
    """The extension's setStatus telling what a write's file held just before pi wrote it."""
    return line(
        {"type": "extension_ui_request", "id": "u1", "method": "setStatus",
         "statusKey": "pi-bridge:original", "statusText": json.dumps({"toolCallId": call_id, **told})}
    )  # fmt: skip


def _late_pi_write(tmp_path: Path, told: dict[str, Any] | None, *, call_id: str = "w1") -> dict[str, Any]:
    """A pi write whose file was written before the bridge's snapshot; its diff."""
    target = tmp_path / "notes.txt"
    capture = Capture(tmp_path)
    target.write_text("content\n")  # pi wrote before the bridge read toolcall_end
    capture.note_line(toolcall_end("w1", "write", {"path": "notes.txt", "content": "content\n"}))
    if told is not None:
        capture.note_line(told_original(call_id, told))
    capture.note_line(execution_end("w1", "write", None))
    (out,) = capture.observe([completed("w1", "write")])
    diff: dict[str, Any] = out.content["diff"]
    return diff


def test_a_pi_write_told_its_file_was_missing_is_null_old_text_however_late_the_snapshot(
    tmp_path: Path,
) -> None:
    diff = _late_pi_write(tmp_path, {"exists": False})
    assert diff == {"path": str(tmp_path / "notes.txt"), "oldText": None, "newText": "content\n", "line": 1}


def test_a_pi_write_over_a_file_takes_its_old_text_from_the_extension(tmp_path: Path) -> None:
    diff = _late_pi_write(tmp_path, {"exists": True, "text": "old one\nold two\n"})
    assert diff == {
        "path": str(tmp_path / "notes.txt"),
        "oldText": "old one\nold two\n",
        "newText": "content\n",
        "line": 1,
    }


@pytest.mark.parametrize(
    "told",
    [{"exists": True}, {"exists": "yes", "text": "x"}, {"text": 3}, {"exists": True, "text": ["x"]}],
)
def test_a_malformed_original_is_ignored_and_the_snapshot_decides(
    tmp_path: Path, told: dict[str, Any]
) -> None:
    assert _late_pi_write(tmp_path, told) == {"path": str(tmp_path / "notes.txt"), "newText": "content\n"}


def test_an_original_told_for_another_call_is_ignored(tmp_path: Path) -> None:
    diff = _late_pi_write(tmp_path, {"exists": False}, call_id="someone-else")
    assert diff == {"path": str(tmp_path / "notes.txt"), "newText": "content\n"}


def test_an_original_whose_status_text_is_not_json_is_ignored(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    capture = Capture(tmp_path)
    target.write_text("content\n")
    capture.note_line(toolcall_end("w1", "write", {"path": "notes.txt", "content": "content\n"}))
    capture.note_line(line({"type": "extension_ui_request", "id": "u1", "method": "setStatus",
                            "statusKey": "pi-bridge:original", "statusText": "{not json"}))  # fmt: skip
    capture.note_line(execution_end("w1", "write", None))
    (out,) = capture.observe([completed("w1", "write")])
    assert out.content["diff"] == {"path": str(target), "newText": "content\n"}


def _claude_write(tmp_path: Path, target: Path, result: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code Write whose file changed before the bridge's snapshot; its diff."""
    sent: list[Out] = []
    capture = DiffCapture(ClaudeFileChangeWatch(str(tmp_path)), sent.extend, start_read=read_now)
    target.write_text("content\n")  # Claude Code ran the Write before the bridge read its line
    tool_use = {
        "type": "tool_use",
        "id": "w1",
        "name": "Write",
        "input": {"file_path": str(target), "content": "content\n"},
    }
    capture.note_line(line({"type": "assistant", "message": {"content": [tool_use]}}))
    tool_result = {"type": "tool_result", "tool_use_id": "w1", "content": "ok"}
    capture.note_line(
        line({"type": "user", "message": {"content": [tool_result]}, "tool_use_result": result})
    )
    capture.send([completed("w1", "Write")])
    (out,) = sent
    diff: dict[str, Any] = out.content["diff"]
    return diff  # fmt: skip


def test_a_claude_write_that_created_its_file_is_null_old_text_however_late_the_snapshot(
    tmp_path: Path,
) -> None:
    target = tmp_path / "new.txt"
    result = {"type": "create", "filePath": str(target), "content": "content\n", "originalFile": None}
    assert _claude_write(tmp_path, target, result) == {
        "path": str(target), "oldText": None, "newText": "content\n", "line": 1
    }  # fmt: skip


def test_a_claude_write_over_a_file_takes_its_old_text_from_claude_code(tmp_path: Path) -> None:
    target = tmp_path / "old.txt"
    result = {"type": "update", "filePath": str(target), "content": "content\n", "originalFile": "before\n"}
    assert _claude_write(tmp_path, target, result) == {
        "path": str(target), "oldText": "before\n", "newText": "content\n", "line": 1
    }  # fmt: skip


def test_a_claude_write_result_without_its_original_falls_back_to_the_snapshot(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    diff = _claude_write(tmp_path, target, {"type": "create", "filePath": str(target)})
    assert diff == {"path": str(target), "newText": "content\n"}, "the late snapshot: old text left out"


def test_a_write_of_unchanged_content_to_an_old_file_is_a_no_change_diff(tmp_path: Path) -> None:
    target = tmp_path / "same.txt"
    target.write_text("same\n")
    past = time.time() - 3600
    os.utime(target, (past, past))
    capture = Capture(tmp_path)
    capture.note_line(toolcall_end("w2", "write", {"path": str(target), "content": "same\n"}))
    (out,) = capture.observe([completed("w2", "write")])
    assert out.content["diff"] == {"path": str(target), "oldText": "same\n", "newText": "same\n"}


def test_the_fallback_announcement_is_tool_execution_start(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(BEFORE)
    capture = Capture(tmp_path)
    capture.note_line(execution_start("c2", "edit", EDIT_ARGS))
    (tmp_path / "notes.txt").write_text(AFTER)
    capture.note_line(execution_end("c2", "edit", EDIT_DETAILS))
    (out,) = capture.observe([completed("c2", "edit")])
    assert out.content["diff"]["oldText"] == BEFORE


def test_failed_and_unrelated_tools_get_no_diff(tmp_path: Path) -> None:
    capture = Capture(tmp_path)
    capture.note_line(toolcall_end("b", "bash", {"command": "echo hi"}))
    capture.note_line(toolcall_end("e", "edit", EDIT_ARGS))
    failed = Out("tool.failed", {"toolCallId": "e", "name": "edit", "error": "no such file"})
    outs = capture.observe([completed("b", "bash"), failed])
    assert "diff" not in outs[0].content and "diff" not in outs[1].content
    assert capture.observe([completed("e", "edit")])[0].content.get("diff") is None


def test_garbage_and_odd_lines_are_ignored(tmp_path: Path) -> None:
    watch = PiFileChangeWatch(str(tmp_path))
    for odd in (b"", b"garbage", b'{"type":"tool_execution_start"', b'{"type":"message_update","x":"toolcall_end"}',
                execution_start("x", "edit", {"path": 3}), execution_end("never-announced", "edit", EDIT_DETAILS)):  # fmt: skip
        assert not watch.feed(odd)


def test_paths_resolve_as_pi_resolves_them(tmp_path: Path) -> None:
    home = os.path.expanduser("~")
    assert resolve_tool_path("a/../b.txt", "/w") == "/w/b.txt"
    assert resolve_tool_path("@src/x.py", "/w") == "/w/src/x.py"
    assert resolve_tool_path("/abs/x", "/w") == "/abs/x"
    assert resolve_tool_path("~/x", "/w") == os.path.join(home, "x")
    assert resolve_tool_path("my\u00a0file", "/w") == "/w/my file"


def test_multi_hunk_patches_without_final_newline_apply_both_ways() -> None:
    from bridge.engines.diff_capture import _apply

    before = "".join(f"l{i}\n" for i in range(1, 40)) + "last"
    after = before.replace("l2\n", "two\nTWO\n").replace("last", "LAST")
    patch = (
        "--- f\n+++ f\n@@ -1,3 +1,4 @@\n l1\n-l2\n+two\n+TWO\n l3\n"
        "@@ -38,2 +39,2 @@\n l38\n-l39\n-last\n\\ No newline at end of file\n+l39\n+LAST\n\\ No newline at end of file\n"
    )
    hunks = parse_unified_patch(patch)
    assert hunks is not None and len(hunks) == 2
    assert _apply(hunks, before) == after
    assert _apply(hunks, after, reverse=True) == before
    assert _apply(hunks, "something else") is None
    assert parse_unified_patch("not a patch") is None


def test_a_crlf_file_keeps_its_exact_texts(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_bytes(BEFORE.replace("\n", "\r\n").encode())
    capture = Capture(tmp_path)
    capture.note_line(toolcall_end("c", "edit", EDIT_ARGS))
    target.write_bytes(AFTER.replace("\n", "\r\n").encode())
    capture.note_line(execution_end("c", "edit", EDIT_DETAILS))
    (out,) = capture.observe([completed("c", "edit")])
    assert out.content["diff"]["oldText"] == BEFORE.replace("\n", "\r\n")
    assert out.content["diff"]["newText"] == AFTER.replace("\n", "\r\n")


def test_first_changed_line() -> None:
    assert first_changed_line("a\nb\n", "a\nc\n") == 2
    assert first_changed_line("a\n", "a\nb\n") == 2
    assert first_changed_line("", "x") == 1
    assert first_changed_line("same", "same") is None


# ---------------------------------------------------------------------------- hostile paths


def read_bounded(path: str) -> FileState:
    """read_state on a thread, failing (not hanging) the test if it blocks."""
    found: list[FileState] = []
    reader = threading.Thread(target=lambda: found.append(read_state(path)), daemon=True)
    reader.start()
    reader.join(5)
    assert found, f"reading {path!r} blocked"
    return found[0]


def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text(BEFORE)
    (tmp_path / "link").symlink_to(regular)
    os.mkfifo(tmp_path / "fifo")
    assert read_bounded(str(tmp_path / "link")).text == BEFORE  # a symlink to a regular file is fine
    for path in (str(tmp_path / "fifo"), "/dev/null", "/dev/zero", str(tmp_path), "a\x00b"):
        state = read_bounded(path)
        assert state.unread and state.text is None, path
    assert read_bounded(str(tmp_path / "missing")) == FileState(None, False)


def test_the_kernel_s_files_are_never_read_as_the_agent_s(tmp_path: Path) -> None:
    """/proc/self is the bridge here, not the agent: /proc/self/fd/N would be the bridge's own
    file (its log, say), sent to the client as the file's old text."""
    log = tmp_path / "bridge.log"
    log.write_text("the bridge's own log\n")
    with open(log) as handle:
        (tmp_path / "innocent.txt").symlink_to("/proc/self/status")
        for path in (
            f"/proc/self/fd/{handle.fileno()}",
            "/proc/self/environ",
            str(tmp_path / "innocent.txt"),
        ):
            state = read_bounded(path)
            assert state.unread and state.text is None, path


def test_a_fifo_swapped_in_after_the_stat_is_opened_without_waiting_and_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fstat of the opened descriptor decides, so a FIFO a tool puts in place between the stat
    and the open is neither waited for (non-blocking open) nor read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    monkeypatch.setattr(diff_capture.os, "stat", lambda path: regular)
    state = read_bounded(str(fifo))
    assert state.unread and state.text is None


class Sent:
    """What a capture emitted, batch by batch."""

    def __init__(self) -> None:
        self.batches: list[list[Out]] = []

    def __call__(self, outs: list[Out]) -> None:
        self.batches.append(list(outs))

    @property
    def types(self) -> list[str]:
        return [out.type for batch in self.batches for out in batch]


async def test_a_read_out_of_time_gives_a_diff_without_texts_and_the_order_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read stuck in the kernel (a hung network file system) holds its tool.completed and what
    follows for READ_SECONDS at most; then they go out, in order, the diff carrying only its path."""
    stuck = threading.Event()
    monkeypatch.setattr(diff_capture, "read_state", lambda path: (stuck.wait(30), FileState(None, False))[1])
    monkeypatch.setattr(diff_capture, "READ_SECONDS", 0.3)
    sent = Sent()
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)), sent)
    try:
        capture.note_line(toolcall_end("c1", "edit", EDIT_ARGS))
        capture.send([Out("assistant", {"text": "before the tool"})])
        capture.note_line(execution_end("c1", "edit", EDIT_DETAILS))
        capture.send([completed("c1", "edit")])
        capture.send([Out("assistant", {"text": "after"}), Out("terminal.completed", {"text": ""})])
        assert sent.types == ["assistant"] and capture.holding
        with anyio.fail_after(5):
            await capture.drained()
        assert sent.types == ["assistant", "tool.completed", "assistant", "terminal.completed"]
        assert sent.batches[1][0].content["diff"] == {"path": str(tmp_path / "notes.txt"), "line": 2}
    finally:
        stuck.set()


async def test_the_snapshot_read_starts_when_the_change_is_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text(BEFORE)
    snapshot_taken = threading.Event()
    real_read = diff_capture.read_state

    def read_and_tell(path: str) -> FileState:
        state = real_read(path)
        snapshot_taken.set()
        return state

    monkeypatch.setattr(diff_capture, "read_state", read_and_tell)
    sent = Sent()
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)), sent)
    capture.note_line(toolcall_end("w", "write", {"path": "notes.txt", "content": AFTER}))
    assert await anyio.to_thread.run_sync(snapshot_taken.wait, 5), "no read started at the announcement"
    target.write_text(AFTER)  # the tool runs
    capture.note_line(execution_end("w", "write", None))
    capture.send([completed("w", "write")])
    with anyio.fail_after(5):
        await capture.drained()
    (diff,) = [out.content["diff"] for out in sent.batches[0]]
    assert diff == {"path": str(target), "oldText": BEFORE, "newText": AFTER, "line": 2}


async def test_a_nul_byte_a_fifo_or_a_device_in_the_path_gives_a_diff_without_texts(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    sent = Sent()
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)), sent)
    for call_id, path in (("n", "bad\x00name"), ("f", "fifo"), ("d", "/dev/zero")):
        capture.note_line(toolcall_end(call_id, "write", {"path": path, "content": "x\n"}))
        capture.send([completed(call_id, "write")])
    with anyio.fail_after(5):
        await capture.drained()
    assert [out.content["diff"] for batch in sent.batches for out in batch] == [
        {"path": str(tmp_path / "bad\x00name")},
        {"path": str(tmp_path / "fifo")},
        {"path": "/dev/zero"},
    ]


async def test_reads_at_once_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads stuck in the kernel keep their threads: past MAX_READS a diff has no texts at once."""
    stuck = threading.Event()
    monkeypatch.setattr(diff_capture, "read_state", lambda path: (stuck.wait(30), FileState(None, False))[1])
    try:
        reads = [diff_capture.read_in_thread(str(tmp_path / "f"), lambda: None) for _ in range(MAX_READS)]
        assert all(read.state is None for read in reads)
        assert diff_capture.read_in_thread(str(tmp_path / "f"), lambda: None).state == FileState(
            None, True, unread=True
        )
    finally:
        stuck.set()


async def test_a_diff_that_cannot_be_computed_is_reported_and_its_messages_still_go_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: DiffCapture, pending: Any) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(DiffCapture, "_diff", broken)
    faults: list[Exception] = []
    sent = Sent()
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)), sent, faults.append)
    capture.note_line(toolcall_end("c", "edit", EDIT_ARGS))
    capture.send([completed("c", "edit"), Out("assistant", {"text": "after"})])
    with anyio.fail_after(5):
        await capture.drained()
    assert sent.types == ["tool.completed", "assistant"]
    assert [str(fault) for fault in faults] == ["a bug"]


def _edit_told(tmp_path: Path, disk: str, told: str) -> dict[str, Any]:
    """An edit whose write went to an editor's buffer (`told`: what it held), the disk untouched."""
    (tmp_path / "notes.txt").write_text(disk)
    capture = Capture(tmp_path)
    capture.note_line(toolcall_end("e1", "edit", EDIT_ARGS))
    capture.note_line(told_original("e1", {"exists": True, "text": told}))
    capture.note_line(execution_end("e1", "edit", EDIT_DETAILS))
    (out,) = capture.observe([completed("e1", "edit")])
    diff: dict[str, Any] = out.content["diff"]
    return diff


def test_an_edit_of_a_buffer_is_its_told_text_with_pi_s_patch_not_the_disk(tmp_path: Path) -> None:
    diff = _edit_told(tmp_path, "the disk's older text\n", BEFORE)
    assert diff == {"path": str(tmp_path / "notes.txt"), "oldText": BEFORE, "newText": AFTER, "line": 2}


def test_an_edit_whose_told_text_the_patch_does_not_fit_falls_back_to_the_disk(tmp_path: Path) -> None:
    diff = _edit_told(tmp_path, BEFORE, "something else\n")
    assert diff == {"path": str(tmp_path / "notes.txt"), "oldText": BEFORE, "newText": AFTER, "line": 2}


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_an_edit_of_a_crlf_buffer_keeps_its_line_endings_and_bom(tmp_path: Path, bom: str) -> None:
    """pi edits a CRLF file keeping CRLF (and its BOM): the diff shows the one changed line, not every line."""
    told = bom + BEFORE.replace("\n", "\r\n")
    diff = _edit_told(tmp_path, "the disk's older text\n", told)
    assert diff["oldText"] == told
    assert diff["newText"] == bom + AFTER.replace("\n", "\r\n")
    assert diff["line"] == 2


def test_an_edit_of_a_crlf_file_snapshotted_then_changed_again_keeps_crlf(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_bytes(BEFORE.replace("\n", "\r\n").encode())
    capture = Capture(tmp_path)
    capture.note_line(toolcall_end("c", "edit", EDIT_ARGS))
    target.write_bytes(b"changed again by someone else\r\n")
    capture.note_line(execution_end("c", "edit", EDIT_DETAILS))
    (out,) = capture.observe([completed("c", "edit")])
    assert out.content["diff"]["oldText"] == BEFORE.replace("\n", "\r\n")
    assert out.content["diff"]["newText"] == AFTER.replace("\n", "\r\n")


def test_a_patch_keeps_each_kept_line_s_bytes_and_gives_added_lines_their_place_s_ending() -> None:
    from bridge.engines.diff_capture import _apply

    hunks = parse_unified_patch("--- f\n+++ f\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n")
    assert hunks is not None
    assert _apply(hunks, "a\r\nb\nc\r\n") == "a\r\nB\nB2\nc\r\n"  # mixed, as pi writes it
    assert _apply(hunks, "\ufeffa\r\nb\r\nc\r\n") == "\ufeffa\r\nB\r\nB2\r\nc\r\n"
    assert _apply(hunks, "\ufeffa\r\nB\r\nB2\r\nc\r\n", reverse=True) == "\ufeffa\r\nb\r\nc\r\n"
    assert _apply(hunks, "a\r\nx\r\nc\r\n") is None
