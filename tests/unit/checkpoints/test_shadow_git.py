"""The shadow repository of a workspace (bridge/checkpoints/shadow_git.py), on real git: snapshots that
honour .gitignore, leave big files out, never touch the user's repository, and restores that
never follow a path out of the workspace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.checkpoints import fs_watch, shadow_git
from bridge.checkpoints.shadow_git import ShadowGitError, ShadowRepo, find_git

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
    monkeypatch.setenv(shadow_git.MAX_FILE_BYTES_ENV, "1000")
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
    monkeypatch.setenv(shadow_git.MAX_FILES_ENV, "5")
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


def _tricky_files(ws: Path) -> dict[str, bytes]:
    """Files whose bytes git would change under the workspace's attributes: LF, CRLF, `$Id$`, a
    filtered one, binary, and an executable; with those attributes and a symlink."""
    files = {
        ".gitattributes": b"* text=auto eol=crlf ident\n*.dat filter=evil\n",
        "lf.txt": b"one\ntwo\n",
        "crlf.txt": b"one\r\ntwo\r\n",
        "mixed.txt": b"one\r\ntwo\nthree\r",
        "id.txt": b"$Id$\nkeep $Id: not-a-hash $ too\n",
        "filtered.dat": b"plain\n",
        "binary.bin": bytes(range(256)) * 4,
        "run.sh": b"#!/bin/sh\necho hi\n",
    }
    for name, data in files.items():
        (ws / name).write_bytes(data)
    (ws / "run.sh").chmod(0o755)
    (ws / "link").symlink_to("lf.txt")
    return files


def _hostile_git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose global git config and attributes file would rewrite every checkout."""
    home = tmp_path / "home"
    marker = tmp_path / "filter-ran"
    (home / ".config" / "git").mkdir(parents=True)
    config = (
        f"[core]\n\tautocrlf = true\n\teol = crlf\n\thooksPath = {home / 'hooks'}\n"
        f'[filter "evil"]\n\tsmudge = "touch {marker}; sed s/plain/SMUDGED/"\n'
        f'\tclean = "touch {marker}; sed s/plain/CLEANED/"\n\trequired = true\n'
    )
    (home / ".gitconfig").write_text(config)
    (home / ".config" / "git" / "config").write_text(config)
    (home / ".config" / "git" / "attributes").write_text("* text eol=crlf ident filter=evil\n")
    (home / "hooks").mkdir()
    hook = home / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return marker


def test_a_restore_puts_back_the_exact_bytes_whatever_the_attributes_and_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = _hostile_git_config(tmp_path, monkeypatch)
    repo, ws = _repo(tmp_path)
    files = _tricky_files(ws)
    before = repo.snapshot("t-before", "before")
    for name, data in files.items():
        assert repo.show(before.commit, name) == data, f"{name}: stored as it was"
    for name in files:
        (ws / name).write_bytes(b"changed by the turn\n")
    (ws / "run.sh").chmod(0o644)
    (ws / "link").unlink()
    (ws / "link").symlink_to("crlf.txt")
    after = repo.snapshot("t-after", "after")
    repo.restore(before.commit, repo.changed(before.commit, after.commit))
    for name, data in files.items():
        assert (ws / name).read_bytes() == data, f"{name}: the exact bytes came back"
    assert os.access(ws / "run.sh", os.X_OK) and not os.access(ws / "lf.txt", os.X_OK)
    assert os.readlink(ws / "link") == "lf.txt"
    for name in files:  # deleted files are written afresh, the same way
        (ws / name).unlink()
    gone = repo.snapshot("t-gone", "gone")
    repo.restore(before.commit, repo.changed(before.commit, gone.commit))
    assert {name: (ws / name).read_bytes() for name in files} == files
    assert not marker.exists(), "no filter or hook of the user's ran"


def test_a_repository_made_before_the_attributes_gets_them(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("one", "one")
    (repo.git_dir / "info" / "attributes").unlink()
    _tricky_files(ws)
    second = repo.snapshot("two", "two")
    assert (repo.git_dir / "info" / "attributes").read_text() == shadow_git.ATTRIBUTES
    assert repo.show(second.commit, "lf.txt") == b"one\ntwo\n"


def test_ignored_in_reads_the_snapshot_s_rules_not_the_workspace_s(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text(".env\nbuild/\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("*.o\n")
    (ws / ".env").write_text("SECRET=1\n")
    before = repo.snapshot("t-before", "before")
    assert ".env" not in repo.files(before.commit)
    (ws / ".gitignore").write_text("")
    (ws / "sub" / ".gitignore").unlink()
    asked = [".env", "build/x", "sub/a.o", "sub/deep/build/y", "a.o", "new.txt", "ünï cödé.txt"]
    assert repo.ignored_in(before.commit, asked) == {".env", "build/x", "sub/a.o", "sub/deep/build/y"}
    assert repo.ignored_in(before.commit, []) == set()


def _tree(repo: ShadowRepo, commit: str) -> str:
    return repo._git("rev-parse", f"{commit}^{{tree}}").strip()


@pytest.mark.skipif(not os.path.isdir("/proc/sys/fs/inotify"), reason="no inotify here")
def test_after_the_first_snapshot_only_the_changed_paths_are_read_and_the_tree_is_a_scan_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the watcher reports gives the very tree a scan of the whole workspace gives: files
    changed, created in new nested folders, deleted, a folder moved, a symlink, ignored files
    (new and already stored), a file grown past the size limit and one shrunk back under it."""
    monkeypatch.setenv(shadow_git.MAX_FILE_BYTES_ENV, "1000")
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "keep.txt").write_text("one\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "src" / "deep" / "a.py").write_text("a\n")
    (ws / "grows.txt").write_text("small\n")
    (ws / "shrinks.bin").write_bytes(b"x" * 5000)
    first = repo.snapshot("one", "one")
    assert repo.watching
    assert first.skipped == (("shrinks.bin", 5000),)
    (ws / "tracked.log").write_text("stored before the rule\n")
    repo._run("update-index", "--add", "-z", "--stdin", stdin="tracked.log\0")

    def no_scan(*_: object) -> shadow_git.Snapshot:
        raise AssertionError("a snapshot scanned the workspace")

    monkeypatch.setattr(repo, "_scan_snapshot", no_scan)
    (ws / "keep.txt").write_text("two\n")
    (ws / "gone.txt").unlink()
    (ws / "new" / "nested").mkdir(parents=True)
    (ws / "new" / "nested" / "b.py").write_bytes(b"b\r\n")
    (ws / "src").rename(ws / "moved")
    (ws / "moved" / "deep" / "a.py").write_text("a2\n")
    (ws / "link").symlink_to("keep.txt")
    (ws / "noise.log").write_text("ignored\n")
    (ws / "tracked.log").write_text("still stored\n")
    (ws / "grows.txt").write_bytes(b"y" * 3000)
    (ws / "shrinks.bin").write_bytes(b"z" * 10)
    second = repo.snapshot("two", "two")
    assert dict(second.skipped) == {"grows.txt": 3000}
    assert repo.show(second.commit, "tracked.log") == b"still stored\n"
    assert repo.show(second.commit, "new/nested/b.py") == b"b\r\n"
    monkeypatch.undo()
    monkeypatch.setenv(shadow_git.MAX_FILE_BYTES_ENV, "1000")
    assert GIT is not None
    monkeypatch.setenv(fs_watch.WATCH_ENV, "0")  # every snapshot of this one scans
    scan = ShadowRepo(GIT, tmp_path / "scan" / "git", ws)
    scan.snapshot("first", "first")
    scan._run("update-index", "--add", "-z", "--stdin", stdin="tracked.log\0")
    scanned = scan.snapshot("scan", "scan")
    assert not scan.watching
    assert repo._git("ls-tree", "-r", second.commit) == scan._git("ls-tree", "-r", scanned.commit)
    assert _tree(repo, second.commit) == _tree(scan, scanned.commit)
    assert repo.files(second.commit) == {
        ".gitignore",
        "keep.txt",
        "new/nested/b.py",
        "moved/deep/a.py",
        "link",
        "tracked.log",
        "shrinks.bin",
    }
    # Nothing changed since: the same snapshot, no git run at all.
    monkeypatch.setattr(repo, "_run", no_scan)
    assert repo.snapshot("three", "three").commit == second.commit


def test_a_change_of_the_ignore_rules_scans_again(tmp_path: Path) -> None:
    """A .gitignore that lets files in that were there all along: only a scan finds them."""
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "old.log").write_text("there all along\n")
    first = repo.snapshot("one", "one")
    assert "old.log" not in repo.files(first.commit)
    (ws / ".gitignore").write_text("")
    second = repo.snapshot("two", "two")
    assert repo.show(second.commit, "old.log") == b"there all along\n"


@pytest.mark.skipif(not os.path.isdir("/proc/sys/fs/inotify"), reason="no inotify here")
def test_a_quick_snapshot_is_the_last_one_again_or_leaves_what_changed_to_the_next(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    assert repo.quick_snapshot("none", "none") is None  # no snapshot yet: nothing to reuse
    (ws / "a.txt").write_text("one\n")
    first = repo.snapshot("one", "one")
    again = repo.quick_snapshot("again", "again")
    assert again is not None and again.commit == first.commit
    # nothing is written on the prompt's path: the ref is written by `name`, before the record
    assert not (repo.git_dir / "refs/pi-bridge/again").exists()
    repo.name(again)
    assert repo._git("rev-parse", "refs/pi-bridge/again").strip() == first.commit
    (ws / "a.txt").write_text("two\n")
    assert repo.quick_snapshot("later", "later") is None
    assert repo.quick_snapshot("later", "later") is None  # what it saw is kept, not lost
    second = repo.snapshot("two", "two")
    assert repo.show(second.commit, "a.txt") == b"two\n"
    assert repo.changed(first.commit, second.commit) == ["a.txt"]


@pytest.mark.skipif(not os.path.isdir("/proc/sys/fs/inotify"), reason="no inotify here")
def test_a_new_ignored_tree_is_walked_neither_on_the_prompt_s_path_nor_ever(tmp_path: Path) -> None:
    """An `npm install` in the workspace between two prompts: the prompt's quick look reads no
    event and walks nothing (it runs on the event loop); the snapshot after it watches the new
    folder but not its node_modules, so a change in there leaves the next look quick."""
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text("node_modules/\n")
    (ws / "a.txt").write_text("one\n")
    repo.snapshot("one", "one")
    assert repo._watcher is not None
    watched = repo._watcher.watched
    deps = ws / "app" / "node_modules"
    for index in range(30):
        (deps / f"pkg{index}" / "lib").mkdir(parents=True)
        (deps / f"pkg{index}" / "lib" / "index.js").write_text("x\n")
    (ws / "app" / "main.js").write_text("main\n")
    assert repo.quick_snapshot("look", "look") is None
    assert repo._watcher.watched == watched, "the prompt's path walked the new folders"
    second = repo.snapshot("two", "two")
    assert repo.files(second.commit) == {".gitignore", "a.txt", "app/main.js"}
    assert repo._watcher.watched == watched + 1, "only app/ is watched, not its node_modules"
    (deps / "pkg0" / "lib" / "index.js").write_text("changed\n")
    again = repo.quick_snapshot("three", "three")
    assert again is not None and again.commit == second.commit


@pytest.mark.skipif(not os.path.isdir("/proc/sys/fs/inotify"), reason="no inotify here")
def test_an_ignored_folder_made_anew_that_holds_a_stored_file_is_still_watched(tmp_path: Path) -> None:
    repo, ws = _repo(tmp_path)
    (ws / ".gitignore").write_text("build/\n")
    (ws / "build").mkdir()
    (ws / "build" / "keep.txt").write_text("one\n")
    repo.snapshot("one", "one")
    repo._run("update-index", "--add", "-z", "--stdin", stdin="build/keep.txt\0")
    repo.snapshot("stored", "stored")
    (ws / "build" / "keep.txt").unlink()
    (ws / "build").rmdir()
    (ws / "build").mkdir()
    (ws / "build" / "keep.txt").write_text("two\n")
    second = repo.snapshot("two", "two")
    assert repo.show(second.commit, "build/keep.txt") == b"two\n"
    (ws / "build" / "keep.txt").write_text("three\n")
    third = repo.snapshot("three", "three")
    assert repo.show(third.commit, "build/keep.txt") == b"three\n"
