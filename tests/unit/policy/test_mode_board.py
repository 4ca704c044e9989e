"""The mode board: each prompt binds its conversation, and a file that holds its mode already is
not written again (a write on the prompt's path waits on the disk and, per system call, on the
GIL); a file changed or deleted behind the board's back is written again."""

from __future__ import annotations

import os
from pathlib import Path

from bridge.contract import PermissionRule
from bridge.policy.gate import Gate


def _stamp(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_ino, info.st_ctime_ns


def test_a_conversation_bound_again_keeps_its_file_until_its_mode_changes(tmp_path: Path) -> None:
    gate = Gate("full", root=tmp_path / "state")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = gate.board.path / "s1"
    gate.bind("s1", None, cwd=str(workspace))
    assert target.read_text() == "full"
    first = _stamp(target)
    gate.bind("s1", None, cwd=str(workspace))  # the follow-up prompt
    assert _stamp(target) == first, "the same mode was written again on the prompt's path"
    assert sorted(p.name for p in gate.board.path.iterdir()) == ["s1"], "no temp file was made"
    gate.bind("s1", "plan", cwd=str(workspace))
    assert target.read_text() == "plan"
    target.write_text("full")  # a command changes the file the agent reads
    gate.bind("s1", None, cwd=str(workspace))
    assert target.read_text() == "plan", "a changed file is put back at the next bind"
    target.unlink()  # a command deletes it
    gate.bind("s1", None, cwd=str(workspace))
    assert target.read_text() == "plan", "a deleted file is put back at the next bind"
    gate.bind("s1", None, hold=True, cwd=str(workspace))
    assert target.read_text() == "plan", "hold shows only in full"
    gate.set_mode("s1", "full")
    gate.bind("s1", None, hold=True, cwd=str(workspace))
    assert target.read_text() == "hold"
    gate.unhold("s1")
    assert target.read_text() == "full"
    gate.close()
    assert not gate.board.path.exists()


def test_a_deny_rule_another_bridge_wrote_holds_at_the_next_bind(tmp_path: Path) -> None:
    """The workspace's rules are read again at a bind once their file changed (a bind on the
    prompt's path reads them only then): a deny rule shows `hold` to a `full` agent."""
    gate = Gate("full", root=tmp_path / "state")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = gate.board.path / "s1"
    gate.bind("s1", None, cwd=str(workspace))
    gate.bind("s1", None, cwd=str(workspace))
    assert target.read_text() == "full"
    deny = PermissionRule.model_validate(
        {
            "id": "no-rm",
            "tool": "*",
            "match": {"commandPrefix": ["rm"]},
            "decision": "deny",
            "scope": "workspace",
        }
    )
    Gate("full", root=tmp_path / "state").rules.add(str(workspace), deny)  # another bridge process
    gate.bind("s1", None, cwd=str(workspace))
    assert target.read_text() == "hold"
    gate.close()
