"""A shadow git repository of one workspace: snapshots of its files, kept in the bridge's state dir."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bridge.checkpoints.fs_watch import Watcher
from bridge.config import env_number
from bridge.process.spawn import run_own

MAX_FILE_BYTES_ENV: Final = "PI_BRIDGE_CHECKPOINT_MAX_FILE_BYTES"
MAX_FILES_ENV: Final = "PI_BRIDGE_CHECKPOINT_MAX_FILES"


def max_file_bytes() -> int:
    """A file bigger than this is left out of the snapshots (its path is in the snapshot's notes)."""
    return int(env_number(MAX_FILE_BYTES_ENV, 10 * 1024 * 1024))


def max_files() -> int:
    """A workspace with more files than this gets no checkpoints (a snapshot would take too long)."""
    return int(env_number(MAX_FILES_ENV, 250_000))


#: One git command; past this, the snapshot fails (and the run goes on without it).
GIT_TIMEOUT_SECONDS: Final = 120.0
_REF_PREFIX: Final = "refs/pi-bridge/"
#: Every attribute that would change a file's bytes between the workspace and a snapshot, unset
#: for every path: it outranks the workspace's `.gitattributes` and the user's attributes file.
ATTRIBUTES: Final = (
    "# pi-bridge 2\n* -text -eol -ident -filter -diff -merge -working-tree-encoding -export-subst\n"
)
#: The shadow repository's own config: what a user's repository could set to change bytes or run
#: code is pinned (global and system config are not read at all).
_CONFIG: Final = (
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.symlinks", "true"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "true"),
    ("core.splitIndex", "true"),
    ("index.skipHash", "true"),
    ("feature.manyFiles", "true"),
    ("core.hooksPath", os.devnull),
    ("core.quotepath", "false"),
    ("gc.auto", "0"),
)
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
    #: The ref still to point at it (`quick_snapshot` leaves the write to `name`, off the prompt's path).
    unnamed: str | None = None


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
        #: Watches the workspace from the first snapshot on (None: every snapshot scans).
        self._watcher: Watcher | None = None
        #: The last snapshot's commit (None: none yet in this process, the next one scans).
        self._last: str | None = None
        #: The files over the size limit, left out of the snapshots: path → size.
        self._big: dict[str, int] = {}

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, name: str, message: str) -> Snapshot:
        """Store the workspace's files as they are now, under ref `name`."""
        if not self._ensure():
            self._last = None  # a repository of an older bridge's: settings that change the index
        changed = self._watcher.drain() if self._watcher is not None and self._last is not None else None
        if changed is None or self._last is None:
            return self._scan_snapshot(name, message)
        if not changed:
            commit = self._last
        else:
            try:
                self._update(changed)
            except ShadowGitError:
                return self._scan_snapshot(name, message)
            tree = self._git("write-tree").strip()
            commit = self._git("commit-tree", tree, "-m", message).strip()
        self._set_ref(name, commit)
        self._last = commit
        return Snapshot(commit=commit, skipped=tuple(sorted(self._big.items())))

    def quick_snapshot(self, name: str, message: str) -> Snapshot | None:
        """`snapshot`, when nothing changed since the last one: that one again, with no git run,
        no event read and nothing written (cheap enough for the event loop); `name` is written
        later, by `name`. None: something may have changed, or the watcher cannot tell;
        `snapshot` is the way (it reads what the watcher saw)."""
        del message  # the last snapshot's commit is reused, message and all
        if not self.watching or self._last is None:
            return None
        assert self._watcher is not None
        if self._watcher.pending():
            return None
        return Snapshot(commit=self._last, skipped=tuple(sorted(self._big.items())), unnamed=name)

    def name(self, snapshot: Snapshot) -> None:
        """Write the ref a `quick_snapshot` left unwritten (before anything records the commit:
        the ref is what keeps it)."""
        if snapshot.unnamed is not None:
            try:
                self._set_ref(snapshot.unnamed, snapshot.commit)
            except OSError as exc:
                raise ShadowGitError(f"could not name snapshot {snapshot.unnamed}: {exc}") from exc

    def _scan_snapshot(self, name: str, message: str) -> Snapshot:
        """A snapshot that scans the whole workspace (the first, or when the watcher lost track);
        the watcher is (re)started before the scan, so nothing written during it is missed."""
        self._ensure()
        if self._watcher is not None:
            self._watcher.close()
        self._watcher = Watcher.start(
            self.work_tree, skip=self._ignored_folders(), left_out=self._left_out_folders
        )
        skipped = self._leave_out_big_files()
        self._git("add", "--all")
        tree = self._git("write-tree").strip()
        commit = self._git("commit-tree", tree, "-m", message).strip()
        self._set_ref(name, commit)
        self._big = dict(skipped)
        self._last = commit
        return Snapshot(commit=commit, skipped=skipped)

    def _ignored_folders(self) -> frozenset[str]:
        """The folders the workspace's ignore rules leave out whole (node_modules, a virtualenv):
        nothing in them is ever snapshotted, so the watcher neither walks nor watches them (a
        change of the rules scans again, and starts the watcher anew)."""
        listed = self._run("ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z")
        names = listed.stdout.decode("utf-8", "surrogateescape").split("\0")
        return frozenset(name.rstrip("/") for name in names if name.endswith("/"))

    def _left_out_folders(self, folders: list[str]) -> set[str]:
        """Of new folders, those the snapshots leave out whole (the watcher neither walks nor
        watches them: an `npm install` makes a tree of thousands): the ignore rules leave them
        out, and no stored file is under them."""
        try:
            ignored = set(folders) - set(self._not_ignored(folders))
            if not ignored:
                return ignored
            stored = self._run("ls-files", "-z", "--", *sorted(ignored))
        except ShadowGitError:
            return set()  # watched, then: what is under them is sorted out file by file
        holding = stored.stdout.decode("utf-8", "surrogateescape").split("\0")
        return {f for f in ignored if not any(path.startswith(f + "/") for path in holding if path)}

    @property
    def watching(self) -> bool:
        """Whether a snapshot costs only what changed (the first is taken, the watcher is on)."""
        return self._last is not None and self._watcher is not None

    def warm(self) -> None:
        """The first snapshot, ahead of any prompt (nothing when one is taken already)."""
        if self._last is None:
            self._scan_snapshot("warm", "the workspace as a conversation opened")

    def close(self) -> None:
        """Stop watching the workspace (the next snapshot scans it)."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._last = None

    def _update(self, changed: set[str]) -> None:
        """Bring the index up to date with the paths the watcher saw change: the files there
        now are added (unless the workspace's ignore rules leave them out, or they are over the
        size limit), the paths gone are removed (a folder's files with it)."""
        if any(os.path.basename(p) == ".gitignore" for p in changed):
            raise ShadowGitError("the ignore rules changed: scan")  # what they cover may have
        big_before = dict(self._big)
        present, gone, grown = self._sort_out(changed)
        if self._big != big_before:  # info/exclude lists them: before check-ignore reads it
            self._write_exclude(sorted(self._big.items()))
        if present:
            present = self._not_ignored(present)
        if gone or grown:
            rm = ("rm", "-r", "--cached", "-f", "-q", "--ignore-unmatch")
            self._run(*rm, "--pathspec-from-file=-", "--pathspec-file-nul", stdin=_nul([*gone, *grown]))
        if present:
            self._run("update-index", "--add", "--remove", "-z", "--stdin", stdin=_nul(present))

    def _not_ignored(self, paths: list[str]) -> list[str]:
        """Those of `paths` the workspace's ignore rules let in, or that a snapshot holds already
        (a stored file stays stored, as with `add`). The rules alone first: that needs no index,
        and only what they ignore is looked up in it."""
        ignored = self._check_ignore(paths, index=False)
        if ignored:
            ignored = self._check_ignore(sorted(ignored), index=True)
        return [p for p in paths if p not in ignored]

    def _check_ignore(self, paths: list[str], *, index: bool) -> set[str]:
        stdin = "".join(f"./{p}\0" for p in paths)  # "./": no pathspec magic in a name
        extra = () if index else ("--no-index",)
        done = self._run("check-ignore", *extra, "-z", "--stdin", stdin=stdin, check=False, literal=False)
        if done.returncode not in (0, 1):
            raise ShadowGitError("git check-ignore failed")
        return {p.removeprefix("./") for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p}

    def _sort_out(self, changed: set[str]) -> tuple[list[str], list[str], list[str]]:
        """The changed paths as files there now, paths gone, and files now over the size limit
        (the record of the big files updated)."""
        present: list[str] = []
        gone: list[str] = []
        grown: list[str] = []
        limit = max_file_bytes()
        for path in sorted(changed):
            if ".git" in path.split("/"):
                continue
            try:
                info = os.lstat(self.work_tree / path)
            except FileNotFoundError:
                gone.append(path)
                self._big.pop(path, None)
                continue
            except OSError as exc:
                raise ShadowGitError(f"{path}: {exc}") from None
            if stat.S_ISDIR(info.st_mode):
                continue  # its files come one by one (the watcher walks a new folder)
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                self._big[path] = info.st_size
                grown.append(path)
                continue
            self._big.pop(path, None)
            if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                present.append(path)
        return present, gone, grown

    def _set_ref(self, name: str, commit: str) -> None:
        """Point ref `name` at `commit`: a loose ref file written in place (no git process)."""
        ref = self.git_dir / (_REF_PREFIX + name)
        ref.parent.mkdir(parents=True, exist_ok=True)
        temp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
        temp.write_text(commit + "\n")
        os.replace(temp, ref)

    def _ensure(self) -> bool:
        """Create the repository, or bring one made by an older bridge to today's settings (its
        attributes file says which: it is written last). False: it had to."""
        attributes = self.git_dir / "info" / "attributes"
        try:
            if attributes.read_text() == ATTRIBUTES:
                return True
        except OSError:
            pass
        self.git_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (self.git_dir / "HEAD").exists():
            self._git("init", "--quiet", "--template=")  # no sample hooks, no template of the user's
        # Appended in one write, not one `git config` process per key: for a single-valued key
        # git takes the last value, so these override whatever an older bridge set.
        lines: list[str] = []
        for key, value in _CONFIG:
            section, name = key.split(".")
            lines += [f"[{section}]", f"\t{name} = {value}"]
        with open(self.git_dir / "config", "a", encoding="utf-8") as config:
            config.write("\n".join(lines) + "\n")
        attributes.parent.mkdir(exist_ok=True)
        attributes.write_text(ATTRIBUTES)
        return False

    def _leave_out_big_files(self) -> tuple[tuple[str, int], ...]:
        """Exclude the files over the size limit from this snapshot (untracked or changed ones:
        a stored file that grew past it is dropped from the index too)."""
        # The workspace's own ignore rules only: info/exclude holds the last snapshot's big files.
        listed = self._git("ls-files", "-z", "--others", "--modified", "--exclude-per-directory=.gitignore")
        paths = [p for p in listed.split("\0") if p]
        most = max_files()
        if len(paths) > most:
            raise ShadowGitError(f"the workspace has over {most:,} files: checkpoints are off for it")
        skipped: list[tuple[str, int]] = []
        limit = max_file_bytes()
        for path in paths:
            try:
                info = os.lstat(self.work_tree / path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                skipped.append((path, info.st_size))
        self._write_exclude(skipped)
        if skipped:
            self._git("rm", "--cached", "-f", "--quiet", "--ignore-unmatch", "--", *(p for p, _ in skipped))
        return tuple(skipped)

    def _write_exclude(self, skipped: list[tuple[str, int]]) -> None:
        exclude = self.git_dir / "info" / "exclude"
        exclude.parent.mkdir(exist_ok=True)
        exclude.write_text("".join(f"/{_glob_escape(path)}\n" for path, _ in skipped))

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

    def ignored_in(self, commit: str, paths: list[str]) -> set[str]:
        """Those of `paths` that the snapshot's own `.gitignore` files ignore: a path such a
        snapshot does not hold may have been there all the same, and is nobody's to delete.

        The rules are read from the snapshot (written to a scratch work tree), not from the
        workspace, whose `.gitignore` may have changed since."""
        if not paths:
            return set()
        listed = self._run("ls-tree", "-r", "-z", commit).stdout.split(b"\0")
        rules: list[tuple[str, str]] = []
        for entry in listed:
            meta, _, raw = entry.partition(b"\t")
            path = raw.decode("utf-8", "surrogateescape")
            fields = meta.split()
            if (
                len(fields) == 3
                and fields[0] in (b"100644", b"100755")
                and os.path.basename(path) == ".gitignore"
            ):
                rules.append((fields[2].decode(), path))
        with tempfile.TemporaryDirectory(dir=self.git_dir, prefix="rules-") as scratch:
            if rules:
                batch = self._run("cat-file", "--batch", stdin="".join(f"{oid}\n" for oid, _ in rules)).stdout
                for (_, path), content in zip(rules, _batch_contents(batch), strict=True):
                    target = Path(scratch, path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
            done = self._run(
                "check-ignore",
                "--no-index",
                "-z",
                "--stdin",
                stdin="".join(f"./{p}\0" for p in paths),  # "./": no pathspec magic in a name
                check=False,
                work_tree=Path(scratch),
                literal=False,  # check-ignore refuses literal pathspecs
            )
        if done.returncode not in (0, 1):
            reason = done.stderr.decode("utf-8", "replace").strip()
            raise ShadowGitError(f"git check-ignore failed: {reason or done.returncode}")
        return {p.removeprefix("./") for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p}

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
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        work_tree: Path | None = None,
        literal: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        tree = work_tree or self.work_tree
        argv = [self.git, "--git-dir", str(self.git_dir), "--work-tree", str(tree), *args]
        try:
            done = run_own(
                argv,
                stdin=stdin.encode("utf-8", "surrogateescape") if stdin is not None else None,
                env=self._env
                if literal
                else {k: v for k, v in self._env.items() if k != "GIT_LITERAL_PATHSPECS"},
                cwd=str(tree),
                timeout=GIT_TIMEOUT_SECONDS,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShadowGitError(f"git {args[0]}: {exc}") from None
        if check and done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ShadowGitError(f"git {args[0]} failed: {reason[-1] if reason else done.returncode}")
        return done


def _batch_contents(output: bytes) -> list[bytes]:
    """The objects' bytes in `git cat-file --batch` output (`<oid> <type> <size>\\n<bytes>\\n` each)."""
    contents: list[bytes] = []
    at = 0
    while at < len(output):
        end = output.index(b"\n", at)
        header = output[at:end].split()
        if len(header) != 3:
            raise ShadowGitError(f"git cat-file: unexpected {output[at:end]!r}")
        size = int(header[2])
        contents.append(output[end + 1 : end + 1 + size])
        at = end + 1 + size + 1
    return contents


def _nul(paths: list[str]) -> str:
    """Paths for a `-z` / `--pathspec-file-nul` standard input."""
    return "".join(f"{p}\0" for p in paths)


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
