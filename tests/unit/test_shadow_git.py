"""The shadow repository of a workspace (bridge/runs/shadow_git.py), on real git: snapshots that
honour .gitignore, leave big files out, never touch the user's repository, and restores that
never follow a path out of the workspace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.runs import shadow_git
from bridge.runs.shadow_git import ShadowGitError, ShadowRepo, find_git

GIT = find_git()
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")


def _repo(tmp_path: Path) -> tuple[ShadowRepo, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert GIT is not None
    return ShadowRepo(GIT, tmp_path / "state" / "git", ws), ws


def _user_git(ws: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x"}
    env.update({"GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"})
    return subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True, text=True).stdout


def test_a_snapshot_honours_gitignore_and_restores_created_changed_and_deleted_files(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "keep.txt").write_text("one\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.bin").write_text("built\n")
    (ws / "debug.log").write_text("noise\n")
    before = repo.snapshot("t-before", "before")
    assert repo.files(before.commit) == {".gitignore", "keep.txt", "gone.txt"}
    (ws / "keep.txt").write_text("two\n")
    (ws / "gone.txt").unlink()
    (ws / "sub").mkdir()
    (ws / "sub" / "new.txt").write_text("new\n")
    (ws / "build" / "out.bin").write_text("rebuilt\n")
    after = repo.snapshot("t-after", "after")
    changed = repo.changed(before.commit, after.commit)
    assert sorted(changed) == ["gone.txt", "keep.txt", "sub/new.txt"]
    repo.restore(before.commit, changed)
    assert (ws / "keep.txt").read_text() == "one\n"
    assert (ws / "gone.txt").read_text() == "bye\n"
    assert not (ws / "sub").exists(), "a folder the removed file leaves empty goes too"
    assert (ws / "build" / "out.bin").read_text() == "rebuilt\n", "ignored: untouched"


def test_the_user_s_repository_index_and_stash_are_never_touched(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    (ws / "a.txt").write_text("a\n")
    _user_git(ws, "init", "-q")
    _user_git(ws, "add", "a.txt")
    _user_git(ws, "commit", "-qm", "c")
    (ws / "a.txt").write_text("wip\n")
    _user_git(ws, "stash", "-q")
    (ws / "staged.txt").write_text("s\n")
    _user_git(ws, "add", "staged.txt")
    seen = (
        _user_git(ws, "status", "--porcelain"),
        _user_git(ws, "stash", "list"),
        _user_git(ws, "ls-files", "-s"),
    )
    index = (ws / ".git" / "index").read_bytes()
    first = repo.snapshot("one", "one")
    assert not any(path.startswith(".git/") for path in repo.files(first.commit))
    (ws / "a.txt").write_text("changed\n")
    repo.snapshot("two", "two")
    repo.restore(first.commit, ["a.txt"])
    assert (ws / ".git" / "index").read_bytes() == index
    assert (
        _user_git(ws, "status", "--porcelain"),
        _user_git(ws, "stash", "list"),
        _user_git(ws, "ls-files", "-s"),
    ) == seen


def test_a_file_over_the_limit_is_left_out_with_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shadow_git, "MAX_FILE_BYTES", 1000)
    repo, ws = _repo(tmp_path)
    (ws / "small.txt").write_text("s\n")
    (ws / "big.bin").write_bytes(b"x" * 5000)
    first = repo.snapshot("one", "one")
    assert first.skipped == (("big.bin", 5000),)
    assert repo.files(first.commit) == {"small.txt"}
    # Still big the next time: still out, and no change is seen in it.
    (ws / "big.bin").write_bytes(b"y" * 6000)
    second = repo.snapshot("two", "two")
    assert repo.changed(first.commit, second.commit) == []
    # A stored file that grows past the limit drops out too.
    (ws / "small.txt").write_bytes(b"z" * 2000)
    third = repo.snapshot("three", "three")
    assert dict(third.skipped) == {"big.bin": 6000, "small.txt": 2000}


def test_too_many_files_turn_checkpoints_off_for_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shadow_git, "MAX_FILES", 5)
    repo, ws = _repo(tmp_path)
    for i in range(6):
        (ws / f"f{i}").write_text("x")
    with pytest.raises(ShadowGitError, match="over 5 files"):
        repo.snapshot("one", "one")


def test_a_restore_never_follows_a_symlink_out_of_the_workspace(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    before = repo.snapshot("one", "one")
    (ws / "link").symlink_to(outside)
    with pytest.raises(ShadowGitError, match="leads out of the workspace"):
        repo.restore(before.commit, ["link/victim.txt"])
    assert (outside / "victim.txt").read_text() == "keep me\n"


def test_no_user_or_system_git_configuration_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\tautocrlf = true\n[user]\n\tname = someone\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    repo, ws = _repo(tmp_path)
    (ws / "crlf.txt").write_bytes(b"a\nb\n")
    snap = repo.snapshot("one", "one")
    assert repo.show(snap.commit, "crlf.txt") == b"a\nb\n"
    assert not (tmp_path / "elsewhere").exists()
