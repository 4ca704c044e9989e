"""bridge/agents/session_files.py: what the agents' appended-to session files share."""

from __future__ import annotations

from pathlib import Path

from bridge.agents.session_files import checkpoint_of, cut_back, delete_file


def test_a_session_file_is_cut_back_to_its_checkpoint_and_a_shorter_one_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    session = tmp_path / "s.jsonl"
    session.write_bytes(b'{"turn": 1}\n')
    checkpoint = checkpoint_of("s", session)
    assert checkpoint is not None and checkpoint.size == 12
    with session.open("ab") as handle:
        handle.write(b'{"turn": 2, "error": "API Error"}\n')
    assert cut_back(checkpoint) is None
    assert session.read_bytes() == b'{"turn": 1}\n'
    session.write_bytes(b"{}\n")  # shorter than the checkpoint: nothing to cut, nothing grown
    assert cut_back(checkpoint) is None
    assert session.read_bytes() == b"{}\n"


def test_a_session_file_that_cannot_be_cut_back_says_why_and_a_symlink_is_never_followed(
    tmp_path: Path,
) -> None:
    gone = checkpoint_of("s", tmp_path / "missing.jsonl")
    assert gone is None
    session = tmp_path / "s.jsonl"
    session.write_bytes(b"x\n")
    checkpoint = checkpoint_of("s", session)
    assert checkpoint is not None
    session.unlink()
    assert "No such file" in (cut_back(checkpoint) or "")
    target = tmp_path / "target"
    target.write_text("kept")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert delete_file(link) and target.read_text() == "kept"
