"""Diff capture on pi 1.6.0's event lines: snapshots in time, and right answers when the race is lost."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from bridge.agent import Out
from bridge.diff_capture import DiffCapture, first_changed_line
from bridge.pi.file_changes import PiFileChangeWatch, parse_unified_patch, resolve_tool_path

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


def completed(call_id: str, name: str) -> Out:
    return Out("tool.completed", {"toolCallId": call_id, "name": name, "output": "ok"})


def run_edit(
    tmp_path: Path, *, edit_before_snapshot: bool, edit_again_before_end: bool = False
) -> dict[str, Any]:
    target = tmp_path / "notes.txt"
    target.write_text(BEFORE)
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
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
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
    target.write_text("content\n")  # written before the bridge read toolcall_end
    capture.note_line(toolcall_end("w1", "write", {"path": "new.txt", "content": "content\n"}))
    capture.note_line(execution_end("w1", "write", None))
    (out,) = capture.observe([completed("w1", "write")])
    assert out.content["diff"] == {"path": str(target), "newText": "content\n"}


def test_a_write_of_unchanged_content_to_an_old_file_is_a_no_change_diff(tmp_path: Path) -> None:
    target = tmp_path / "same.txt"
    target.write_text("same\n")
    past = time.time() - 3600
    os.utime(target, (past, past))
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
    capture.note_line(toolcall_end("w2", "write", {"path": str(target), "content": "same\n"}))
    (out,) = capture.observe([completed("w2", "write")])
    assert out.content["diff"] == {"path": str(target), "oldText": "same\n", "newText": "same\n"}


def test_the_fallback_announcement_is_tool_execution_start(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(BEFORE)
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
    capture.note_line(execution_start("c2", "edit", EDIT_ARGS))
    (tmp_path / "notes.txt").write_text(AFTER)
    capture.note_line(execution_end("c2", "edit", EDIT_DETAILS))
    (out,) = capture.observe([completed("c2", "edit")])
    assert out.content["diff"]["oldText"] == BEFORE


def test_failed_and_unrelated_tools_get_no_diff(tmp_path: Path) -> None:
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
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
    from bridge.diff_capture import _apply

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
    capture = DiffCapture(PiFileChangeWatch(str(tmp_path)))
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
