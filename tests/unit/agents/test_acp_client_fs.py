"""The ACP client's fs half (bridge/agents/acp/client_fs.py): an agent's `fs/*` requests done by
the run's file operations, over a real FileAccess policy on a temp dir (judged from the disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson

from bridge.agents.acp.client_fs import fs_answer, fs_op, refused
from bridge.agents.values import FileOp, FileOpResult
from bridge.policy.file_access import FileAccess
from bridge.policy.file_ops import do_op


def _answer(workspace: Path, method: str, params: dict[str, Any], kept_out: tuple[str, ...] = ()) -> Any:
    policy = FileAccess.of(str(workspace), "off", kept_out)

    async def file_ops(op: FileOp) -> FileOpResult:
        return do_op(policy, {}, op)

    op = fs_op(method, params, "call-1")
    assert op is not None
    line = anyio.run(fs_answer, 7, op, params, file_ops)
    message = orjson.loads(line)
    assert message["id"] == 7 and message["jsonrpc"] == "2.0"
    return message


def test_a_missing_file_reads_as_empty_and_a_present_one_as_its_lines(tmp_path: Path) -> None:
    assert _answer(tmp_path, "fs/read_text_file", {"path": str(tmp_path / "nope.txt")})["result"] == {
        "content": ""
    }
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    whole = _answer(tmp_path, "fs/read_text_file", {"path": str(tmp_path / "a.txt")})
    assert whole["result"] == {"content": "one\ntwo\nthree\n"}
    part = _answer(tmp_path, "fs/read_text_file", {"path": str(tmp_path / "a.txt"), "line": 2, "limit": 1})
    assert part["result"] == {"content": "two\n"}


def test_a_write_lands_and_one_into_a_kept_out_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "new.txt"
    done = _answer(tmp_path, "fs/write_text_file", {"path": str(target), "content": "hello\n"})
    assert done["result"] == {} and target.read_text() == "hello\n"
    secret = tmp_path / ".ssh"
    refusal = _answer(
        tmp_path,
        "fs/write_text_file",
        {"path": str(secret / "authorized_keys"), "content": "x"},
        kept_out=(str(secret),),
    )
    assert "hidden from the agent's tools" in refusal["error"]["message"]
    assert not secret.exists(), "nothing was written"


def test_a_read_of_a_kept_out_file_is_refused_not_answered_empty(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("sk-do-not-read")
    refusal = _answer(tmp_path, "fs/read_text_file", {"path": str(secret / "key")}, kept_out=(str(secret),))
    assert "error" in refusal and "sk-do-not-read" not in orjson.dumps(refusal).decode()


def test_requests_that_are_not_file_requests_are_not_ops() -> None:
    assert fs_op("fs/write_text_file", {"path": "/x"}, "c") is None  # no content
    assert fs_op("fs/read_text_file", {"path": 3}, "c") is None
    assert fs_op("fs/delete", {"path": "/x"}, "c") is None
    assert orjson.loads(refused(1, "why"))["error"]["message"] == "refused: why"
