"""The file operations pi's tools hand to the bridge: read from the extension's request
(bridge/agents/pi/tool_checks.py), done under the run's policy (bridge/policy/file_ops.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson

from bridge.agents.pi.tool_checks import file_op, fs_answer_line, is_fs_request, tool_check
from bridge.agents.values import FileOp, FileOpResult
from bridge.policy.file_access import FileAccess
from bridge.policy.file_ops import do_op


def _request(payload: object) -> dict[str, object]:
    return {
        "method": "input",
        "title": "pi-bridge:fs",
        "id": "x",
        "placeholder": orjson.dumps(payload).decode(),
    }


def test_a_write_request_is_read_with_its_bytes() -> None:
    data = base64.b64encode("héllo".encode()).decode()
    request = _request({"toolCallId": "c1", "tool": "write", "op": "write", "path": "/w/a", "data": data})
    assert is_fs_request(request)
    assert file_op(request) == FileOp("c1", "write", "write", "/w/a", data="héllo".encode())


def test_a_request_that_is_not_an_operation_is_none() -> None:
    assert file_op(_request({"toolCallId": "c1", "tool": "read", "op": "chmod", "path": "/x"})) is None
    assert file_op(_request({"toolCallId": "c1", "tool": "read", "op": "read"})) is None
    assert (
        file_op(_request({"toolCallId": "c1", "tool": "write", "op": "write", "path": "/x", "data": "!"}))
        is None
    )
    assert file_op({"method": "input", "title": "pi-bridge:fs", "placeholder": "not json"}) is None


def test_the_answer_carries_bytes_as_base64_and_errors_as_text() -> None:
    line = orjson.loads(fs_answer_line("r1", FileOpResult(data=b"\x00\xff", kind="file")))
    assert line["type"] == "extension_ui_response" and line["id"] == "r1"
    assert orjson.loads(line["value"]) == {"data": "AP8=", "kind": "file"}
    error = orjson.loads(orjson.loads(fs_answer_line("r2", FileOpResult(error="refused: no")))["value"])
    assert error == {"error": "refused: no"}


def test_the_gate_judges_the_resolved_path_pi_sent() -> None:
    payload = {
        "toolCallId": "c1",
        "toolName": "write",
        "input": {"path": "file:///home/u/.bashrc", "content": "x"},
        "resolvedPath": "/home/u/.bashrc",
    }
    check = tool_check({"placeholder": orjson.dumps(payload).decode()})
    assert check is not None and check.path == "/home/u/.bashrc"
    assert check.change is not None and check.change.path == "file:///home/u/.bashrc"  # shown as given


def test_an_operation_on_another_path_than_the_judged_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "approved.txt").write_text("a")
    (tmp_path / "other.txt").write_text("secret-ish")
    policy = FileAccess.of(str(tmp_path), "off", [])
    judged = {"c1": str(tmp_path / "approved.txt")}
    other = do_op(policy, judged, FileOp("c1", "read", "read", str(tmp_path / "other.txt")))
    assert other.error is not None and "not the path this call was approved for" in other.error
    assert do_op(policy, judged, FileOp("c1", "read", "read", str(tmp_path / "approved.txt"))).data == b"a"
    # a call the gate never judged (full mode) is held by the policy alone
    assert (
        do_op(policy, judged, FileOp("c2", "read", "read", str(tmp_path / "other.txt"))).data == b"secret-ish"
    )


def test_a_write_makes_its_parent_and_tells_what_the_file_held(tmp_path: Path) -> None:
    policy = FileAccess.of(str(tmp_path), "workspace-write", [])
    made = do_op(policy, {}, FileOp("c1", "write", "write", str(tmp_path / "new" / "f.txt"), data=b"one"))
    assert made == FileOpResult(kind="missing")
    again = do_op(policy, {}, FileOp("c2", "write", "write", str(tmp_path / "new" / "f.txt"), data=b"two"))
    assert again == FileOpResult(kind="file", data=b"one")
    assert (tmp_path / "new" / "f.txt").read_bytes() == b"two"
    outside = do_op(
        policy, {}, FileOp("c3", "write", "write", str(tmp_path.parent / "x" / "f.txt"), data=b"x")
    )
    assert outside.error is not None and "outside the workspace" in outside.error
    assert not (tmp_path.parent / "x").exists()


def test_ls_learns_kinds_and_a_tree_tool_stays_inside_its_judged_root(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    policy = FileAccess.of(str(tmp_path), "off", [])
    judged = {"c1": str(tmp_path)}
    listed = do_op(policy, judged, FileOp("c1", "ls", "listdir", str(tmp_path)))
    assert listed.names == ("d/", "f")
    assert do_op(policy, judged, FileOp("c1", "ls", "kind", str(tmp_path / "d"))).kind == "dir"
    outside = do_op(policy, judged, FileOp("c1", "ls", "listdir", str(tmp_path.parent)))
    assert outside.error is not None
