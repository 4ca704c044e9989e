"""A shadow git repository of one workspace: snapshots of its files, kept in the bridge's state dir.

`git --git-dir <state>/checkpoints/<workspace key>/git --work-tree <workspace>`: the user's own
`.git`, index and stash are never touched (git never stores a `.git` path, and this repository's
index is its own), the workspace's `.gitignore` rules hold, and a file over the size limit is
left out with a note. No user or system git configuration applies (its hooks, filters and
line-ending rules are the user's repository's business, not a snapshot's).

Every method is blocking: callers run it in a worker thread, one at a time per workspace.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bridge.process.spawn import run_own

#: A file bigger than this is left out of the snapshots (its path is in the snapshot's notes).
MAX_FILE_BYTES: Final = int(os.environ.get("PI_BRIDGE_CHECKPOINT_MAX_FILE_BYTES", str(10 * 1024 * 1024)))
#: A workspace with more files than this gets no checkpoints (a snapshot would take too long).
MAX_FILES: Final = int(os.environ.get("PI_BRIDGE_CHECKPOINT_MAX_FILES", "50000"))
#: One git command; past this, the snapshot fails (and the run goes on without it).
GIT_TIMEOUT_SECONDS: Final = 120.0
_REF_PREFIX: Final = "refs/pi-bridge/"
_IDENTITY: Final = {
    "GIT_AUTHOR_NAME": "pi-bridge",
    "GIT_AUTHOR_EMAIL": "pi-bridge@localhost",
    "GIT_COMMITTER_NAME": "pi-bridge",
    "GIT_COMMITTER_EMAIL": "pi-bridge@localhost",
}


class ShadowGitError(Exception):
    """A snapshot or a restore could not be made; the message says why, for the user."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One snapshot: its commit, and the files left out of it (path, size in bytes)."""

    commit: str
    skipped: tuple[tuple[str, int], ...] = ()


def find_git(env_path: str | None = None) -> str | None:
    """The git executable on PATH (None: checkpoints are off)."""
    return shutil.which("git", path=env_path)


class ShadowRepo:
    """The snapshots of one workspace."""

    def __init__(self, git: str, git_dir: Path, work_tree: Path) -> None:
        self.git = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self._env.update(_IDENTITY)
        self._env.update(
            {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_LITERAL_PATHSPECS": "1"}
        )

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, name: str, message: str) -> Snapshot:
        """Store the workspace's files as they are now, under ref `name`."""
        self._ensure()
        skipped = self._leave_out_big_files()
        self._git("add", "--all")
        tree = self._git("write-tree").strip()
        commit = self._git("commit-tree", tree, "-m", message).strip()
        self._git("update-ref", _REF_PREFIX + name, commit)
        return Snapshot(commit=commit, skipped=skipped)

    def _ensure(self) -> None:
        if (self.git_dir / "HEAD").exists():
            return
        self.git_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._git("init", "--quiet")
        for key, value in (("core.autocrlf", "false"), ("core.quotepath", "false"), ("gc.auto", "0")):
            self._git("config", key, value)

    def _leave_out_big_files(self) -> tuple[tuple[str, int], ...]:
        """Exclude the files over the size limit from this snapshot (untracked or changed ones:
        a stored file that grew past it is dropped from the index too)."""
        # The workspace's own ignore rules only: info/exclude holds the last snapshot's big files.
        listed = self._git("ls-files", "-z", "--others", "--modified", "--exclude-per-directory=.gitignore")
        paths = [p for p in listed.split("\0") if p]
        if len(paths) > MAX_FILES:
            raise ShadowGitError(f"the workspace has over {MAX_FILES:,} files: checkpoints are off for it")
        skipped: list[tuple[str, int]] = []
        for path in paths:
            try:
                info = os.lstat(self.work_tree / path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size > MAX_FILE_BYTES:
                skipped.append((path, info.st_size))
        exclude = self.git_dir / "info" / "exclude"
        exclude.parent.mkdir(exist_ok=True)
        exclude.write_text("".join(f"/{_glob_escape(path)}\n" for path, _ in skipped))
        if skipped:
            self._git("rm", "--cached", "-f", "--quiet", "--ignore-unmatch", "--", *(p for p, _ in skipped))
        return tuple(skipped)

    # ------------------------------------------------------------------ reading

    def changed(self, before: str, after: str) -> list[str]:
        """The paths whose content differs between two snapshots."""
        if before == after:
            return []
        listed = self._git("diff-tree", "-r", "-z", "--name-only", "--no-renames", before, after)
        return [p for p in listed.split("\0") if p]

    def files(self, commit: str) -> set[str]:
        """Every path a snapshot holds."""
        listed = self._git("ls-tree", "-r", "-z", "--name-only", commit)
        return {p for p in listed.split("\0") if p}

    def show(self, commit: str, path: str) -> bytes | None:
        """A file's bytes in a snapshot (None: it held no such file)."""
        if not path or "\0" in path or path.startswith("/"):
            return None
        done = self._run("cat-file", "blob", f"{commit}:{path}", check=False)
        return done.stdout if done.returncode == 0 else None

    # ------------------------------------------------------------------ restoring

    def restore(self, commit: str, paths: list[str]) -> None:
        """Put `paths` back as the snapshot has them: written, or removed where it had none.

        A path that leads out of the workspace (through a symlink made since) is refused: what
        the model created decides nothing outside the workspace.
        """
        held = self.files(commit)
        back = [p for p in paths if p in held]
        gone = [p for p in paths if p not in held]
        root = os.path.realpath(self.work_tree)
        for path in paths:
            parent = os.path.realpath(os.path.dirname(self.work_tree / path))
            if parent != root and not parent.startswith(root + os.sep):
                raise ShadowGitError(f"{path}: leads out of the workspace; nothing was restored")
        if back:
            self._run(
                "checkout", commit, "--pathspec-from-file=-", "--pathspec-file-nul", stdin="\0".join(back)
            )
        for path in gone:
            target = self.work_tree / path
            try:
                info = os.lstat(target)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                continue
            target.unlink()
            _remove_empty_parents(target.parent, self.work_tree)

    def forget(self, names: list[str]) -> None:
        """Drop snapshots by ref name (their objects go at the next prune)."""
        if names:
            stdin = "".join(f"delete {_REF_PREFIX}{name}\n" for name in names)
            self._run("update-ref", "--stdin", stdin=stdin)

    def prune(self) -> None:
        """Remove what no snapshot needs any more."""
        self._git("gc", "--quiet", "--prune=now")

    # ------------------------------------------------------------------ git

    def _git(self, *args: str) -> str:
        return self._run(*args).stdout.decode("utf-8", "surrogateescape")

    def _run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        argv = [self.git, "--git-dir", str(self.git_dir), "--work-tree", str(self.work_tree), *args]
        try:
            done = run_own(
                argv,
                stdin=stdin.encode("utf-8", "surrogateescape") if stdin is not None else None,
                env=self._env,
                cwd=str(self.work_tree),
                timeout=GIT_TIMEOUT_SECONDS,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShadowGitError(f"git {args[0]}: {exc}") from None
        if check and done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ShadowGitError(f"git {args[0]} failed: {reason[-1] if reason else done.returncode}")
        return done


def _glob_escape(path: str) -> str:
    """A path as a gitignore pattern that matches it alone."""
    return "".join("\\" + c if c in "*?[]\\!# " else c for c in path)


def _remove_empty_parents(folder: Path, root: Path) -> None:
    """Remove the folders a removed file leaves empty, up to the workspace (not it)."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
