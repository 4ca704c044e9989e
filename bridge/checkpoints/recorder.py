"""Checkpoints: the workspace's files before every prompt of a conversation, and where each turn
left them; `pi/checkpoints` lists them and `pi/rewind` puts the files back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.checkpoints.shadow_git import ShadowGitError, ShadowRepo, Snapshot, find_git
from bridge.config import env_number
from bridge.policy.run_view import RunView

log = logging.getLogger(__name__)

PER_SESSION_ENV: Final = "PI_BRIDGE_CHECKPOINTS_PER_SESSION"
CHECKPOINTS_DIR: Final = "checkpoints"
#: A checkpoint keeps its prompt to name it by, cut to this: a prompt of many megabytes would
#: otherwise sit in every listing and in the records rewritten at each turn.
MAX_PROMPT_CHARS: Final = 65_536
#: How long a listing or a rewind waits for the record of a turn that has just ended.
RECORD_WAIT_SECONDS: Final = 60.0
Restore = Literal["files", "conversation", "both"]
_LEFT_OUT: Final = re.compile(r"left out (.+): \d+ MB, over the size limit", re.DOTALL)


class CheckpointError(Exception):
    """A checkpoint request that cannot be done (the message says why)."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class CheckpointRecord(BaseModel):
    """One prompt's checkpoint, as stored; or a files rewind (`kind` "rewind"), which is no
    checkpoint but tells the bridge's own changes from the user's."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["turn", "rewind"] = "turn"
    checkpoint_id: str
    run_id: str
    prompt: str
    created_at: str
    cwd: str
    #: The prompts of the conversation before this one (where a conversation rewind forks).
    ordinal: int = Field(ge=0)
    before: str
    after: str | None = None
    files: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    #: The files the snapshot before left out for their size: there, but not in it.
    left_out: list[str] = Field(default_factory=list)

    def left_out_paths(self) -> set[str]:
        """The files `before` left out (read off the notes of a record written before
        `left_out` was)."""
        if self.left_out:
            return set(self.left_out)
        return {m.group(1) for note in self.notes if (m := _LEFT_OUT.fullmatch(note)) is not None}


class _SessionFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: Literal[1] = 1
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)


class FilesPlan(BaseModel):
    """What a files rewind changes, and what it leaves alone as the user's."""

    restored: list[str]
    conflicts: list[str]


async def _guarded(run: RunView, work: Coroutine[Any, Any, None]) -> None:
    """A checkpoint's work in the background: whatever goes wrong there is logged, and never
    reaches the task group every run shares (the bridge must not die of a snapshot)."""
    try:
        await work
    except Exception:
        log.exception("run %s: a checkpoint failed", run.run_id)


def _key(text: str) -> str:
    return hashlib.sha256(os.fsencode(text)).hexdigest()[:32]


class Checkpoints:
    """Every conversation's checkpoints, over one shadow repository per workspace."""

    def __init__(self, root: Path, spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]) -> None:
        self.root = root / CHECKPOINTS_DIR
        self._spawn = spawn
        self.git = find_git(os.environ.get("PATH"))
        self._locks: dict[str, anyio.Lock] = {}
        self._repos: dict[str, ShadowRepo] = {}
        #: Per repository, the work that takes snapshots (a first snapshot, a turn's, a rewind),
        #: spawned and not yet done: a snapshot on the event loop is taken only when there is none.
        self._queued: dict[str, int] = {}
        self._pending: dict[str, tuple[str, Snapshot | None]] = {}
        #: Per conversation, the records of its ended turns still being written: a listing or a
        #: rewind waits for them, so it never misses the turn that just answered.
        self._recording: dict[str, list[anyio.Event]] = {}
        #: Called once a run's tools may go (its snapshot taken, or given up).
        self.on_ready: Callable[[RunView], None] | None = None
        #: initializationOptions.checkpoints.
        self.enabled = True

    # ------------------------------------------------------------------ status

    def status(self) -> tuple[bool, str | None]:
        """Whether checkpoints are on, and why not."""
        if not self.enabled:
            return False, "off (initializationOptions.checkpoints is false)"
        if self.git is None:
            return False, "git is not installed (checkpoints need it: apt-get install git)"
        return True, None

    # ------------------------------------------------------------------ taking them

    def prepare(self, cwd: str) -> None:
        """Take the workspace's first snapshot now, in the background (a conversation opens):
        it hashes every file, and from it on a snapshot costs only what changed."""
        if not self.status()[0]:
            return
        repo = self._repo(cwd)
        if repo.watching:
            return

        async def warm() -> None:
            try:
                async with self._lock(repo):
                    await anyio.to_thread.run_sync(repo.warm)
            except ShadowGitError as exc:
                log.info("the workspace's first snapshot: %s", exc)
            finally:
                self._queue(repo, -1)

        self._queue(repo, +1)
        if not self._spawn(warm):
            self._queue(repo, -1)

    def begin(self, run: RunView) -> None:
        """Start the run's snapshot (a prompt of a conversation); its tools wait for it."""
        if not self.status()[0] or run.options.command is not None:
            return
        run.before_tools = anyio.Event()
        if self._take_before_now(run):
            return  # nothing changed since the last snapshot: no tool is held for it

        def start() -> None:
            assert run.before_tools is not None
            if self._take_before_now(run):
                return
            repo = self._repo(run.options.cwd)
            self._queue(repo, +1)

            async def take() -> None:
                try:
                    await _guarded(run, self._take_before(run))
                finally:
                    self._queue(repo, -1)

            if not self._spawn(take):
                self._queue(repo, -1)
                run.before_tools.set()  # the bridge is stopping: no snapshot, and nothing waits for one

        run.checkpoint_start = start

    def _take_before_now(self, run: RunView) -> bool:
        """The snapshot before the prompt taken here and now, when it is the last one again:
        nothing changed since (the watcher says so) and no snapshot of the workspace is under way
        or queued (they go in order). No git runs and no worker thread is waited for: the
        prompt and its first tool wait for nothing. False: the snapshot is to be taken in the
        background."""
        repo = self._repo(run.options.cwd)
        if self._queued.get(str(repo.git_dir)):
            return False
        try:
            snapshot = repo.quick_snapshot(f"{run.run_id}-before", f"before {run.run_id}")
        except (ShadowGitError, OSError):
            return False
        if snapshot is None:
            return False
        self._pending[run.run_id] = (run.options.cwd, snapshot)
        assert run.before_tools is not None
        run.before_tools.set()
        if self.on_ready is not None:
            self.on_ready(run)
        return True

    def _queue(self, repo: ShadowRepo, step: int) -> None:
        key = str(repo.git_dir)
        self._queued[key] = self._queued.get(key, 0) + step
        if not self._queued[key]:
            del self._queued[key]

    async def _take_before(self, run: RunView) -> None:
        repo = self._repo(run.options.cwd)
        snapshot: Snapshot | None = None
        try:
            async with self._lock(repo):
                snapshot = await anyio.to_thread.run_sync(
                    repo.snapshot, f"{run.run_id}-before", f"before {run.run_id}"
                )
        except ShadowGitError as exc:
            log.warning("run %s: no checkpoint: %s", run.run_id, exc)
            run.checkpoint_note = str(exc)
        finally:
            self._pending[run.run_id] = (run.options.cwd, snapshot)
            assert run.before_tools is not None
            run.before_tools.set()
            if self.on_ready is not None:
                self.on_ready(run)

    def end(self, run: RunView) -> None:
        """The run has ended: record where it left the files. The snapshot is queued now, ahead
        of the conversation's next prompt's (one workspace's snapshots are taken in order), and
        taken off the run's answer: a cancel or an answer waits for no git."""
        if run.before_tools is None:
            return
        if run.checkpoint_start is not None:
            run.checkpoint_start = None  # the agent never spoke: nothing it did to record
            run.before_tools.set()
            self._pending.pop(run.run_id, None)
            return
        recorded = anyio.Event()
        if run.session_id is not None:
            self._recording.setdefault(run.session_id, []).append(recorded)

        repo = self._repo(run.options.cwd)
        after = self._take_after_now(run, repo)
        if after is not None:

            async def record_now() -> None:
                try:
                    await _guarded(run, self._record_turn(run, after))
                finally:
                    recorded.set()

            if not self._spawn(record_now):
                recorded.set()
            return
        self._queue(repo, +1)

        async def record() -> None:
            try:
                await _guarded(run, self._take_after(run))
            finally:
                self._queue(repo, -1)
                recorded.set()

        if not self._spawn(record):
            self._queue(repo, -1)
            recorded.set()

    def _take_after_now(self, run: RunView, repo: ShadowRepo) -> Snapshot | None:
        """The snapshot after the run taken here and now, when nothing changed since the last
        one and no snapshot of the workspace is under way or queued: the next prompt's then
        finds none queued, and is taken on the loop as well (its tools held for nothing).
        None: to be taken in the background."""
        assert run.before_tools is not None
        pending = self._pending.get(run.run_id)
        if not run.before_tools.is_set() or pending is None or pending[1] is None:
            return None
        if self._queued.get(str(repo.git_dir)):
            return None
        try:
            return repo.quick_snapshot(f"{run.run_id}-after", f"after {run.run_id}")
        except (ShadowGitError, OSError):
            return None

    async def _take_after(self, run: RunView) -> None:
        assert run.before_tools is not None
        await run.before_tools.wait()
        await self._record_turn(run, None)

    async def _record_turn(self, run: RunView, after: Snapshot | None) -> None:
        """Name the turn's snapshots (taking the one after it, when not given), list the files it
        changed and add its record: one trip to a worker thread, in turn with the workspace's
        other snapshots and records."""
        cwd, before = self._pending.pop(run.run_id, (run.options.cwd, None))
        session_id = run.session_id
        if before is None or session_id is None:
            return
        repo = self._repo(cwd)

        def record() -> None:
            kept, files = after, []
            try:
                repo.name(before)
                if kept is None:
                    kept = repo.snapshot(f"{run.run_id}-after", f"after {run.run_id}")
                repo.name(kept)
                if kept.commit != before.commit:
                    files = repo.changed(before.commit, kept.commit)
            except ShadowGitError as exc:
                log.warning("run %s: the turn's files were not recorded: %s", run.run_id, exc)
                kept = None
            self._add(session_id, run, cwd, before, kept, files)

        async with self._lock(repo):
            await anyio.to_thread.run_sync(record)

    def _add(
        self,
        session_id: str,
        run: RunView,
        cwd: str,
        before: Snapshot,
        after: Snapshot | None,
        files: list[str],
    ) -> None:
        stored = self._read(session_id)
        record = CheckpointRecord(
            checkpoint_id=f"cp-{run.run_id}",
            run_id=run.run_id,
            prompt=run.params.prompt[:MAX_PROMPT_CHARS],
            created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            cwd=cwd,
            ordinal=sum(1 for r in stored.checkpoints if r.kind == "turn"),
            before=before.commit,
            after=after.commit if after is not None else None,
            files=files,
            notes=[
                f"left out {path}: {size / 1e6:.0f} MB, over the size limit" for path, size in before.skipped
            ],
            left_out=[path for path, _ in before.skipped],
        )
        stored.checkpoints.append(record)
        kept = max(1, int(env_number(PER_SESSION_ENV, 100)))  # the oldest go first
        dropped = stored.checkpoints[:-kept]
        stored.checkpoints = stored.checkpoints[-kept:]
        self._write(session_id, stored)
        if dropped:
            repo = self._repo(cwd)
            names = [f"{r.run_id}-{side}" for r in dropped for side in ("before", "after")]
            try:
                repo.forget(names)
            except ShadowGitError as exc:
                log.info("old checkpoints not pruned: %s", exc)

    # ------------------------------------------------------------------ reading

    async def _recorded(self, session_id: str) -> None:
        """Wait (bounded) until the conversation's ended turns are all recorded."""
        waiting = self._recording.get(session_id, [])
        with anyio.move_on_after(RECORD_WAIT_SECONDS):
            for event in list(waiting):
                await event.wait()
        self._recording[session_id] = [event for event in waiting if not event.is_set()]
        if not self._recording[session_id]:
            del self._recording[session_id]

    async def of_session(self, session_id: str) -> list[CheckpointRecord]:
        """A conversation's checkpoints, oldest first (its last turn's included, once recorded)."""
        await self._recorded(session_id)
        stored = await anyio.to_thread.run_sync(self._read, session_id)
        return [r for r in stored.checkpoints if r.kind == "turn"]

    async def find(self, session_id: str, checkpoint_id: str) -> tuple[list[CheckpointRecord], int]:
        """A conversation's records (its rewinds too) and the index of one of its checkpoints
        (CheckpointError if none)."""
        await self._recorded(session_id)
        listed = (await anyio.to_thread.run_sync(self._read, session_id)).checkpoints
        for index, record in enumerate(listed):
            if record.checkpoint_id == checkpoint_id and record.kind == "turn":
                return listed, index
        raise CheckpointError(f"no checkpoint {checkpoint_id!r} in session {session_id!r}", not_found=True)

    async def file_at(self, record: CheckpointRecord, path: str) -> bytes | None:
        """A file as it was at a checkpoint (None: it did not exist)."""
        repo = self._repo(record.cwd)
        return await anyio.to_thread.run_sync(repo.show, record.before, path)

    # ------------------------------------------------------------------ rewinding files

    async def rewind_files(
        self, session_id: str, listed: list[CheckpointRecord], index: int, *, dry_run: bool, force: bool
    ) -> FilesPlan:
        """The files back to how they were before checkpoint `index`'s prompt.

        What the turns since did is undone; what the user changed since (between turns, or after
        the last) is a conflict, left alone unless `force`. The rewind is recorded, so a later
        one does not take its changes for the user's.
        """
        record = listed[index]
        repo = self._repo(record.cwd)
        self._queue(repo, +1)
        try:
            async with self._lock(repo):
                plan, now, after = await anyio.to_thread.run_sync(
                    self._rewind_files, repo, listed[index:], dry_run, force
                )
                if after is not None:
                    await anyio.to_thread.run_sync(self._add_rewind, session_id, record.cwd, now, after)
        finally:
            self._queue(repo, -1)
        return plan

    def _add_rewind(self, session_id: str, cwd: str, before: str, after: str) -> None:
        stored = self._read(session_id)
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        event = CheckpointRecord(
            kind="rewind",
            checkpoint_id=f"rewind-{os.urandom(4).hex()}",
            run_id="",
            prompt="",
            created_at=stamp,
            cwd=cwd,
            ordinal=0,
            before=before,
            after=after,
        )
        stored.checkpoints.append(event)
        self._write(session_id, stored)

    @staticmethod
    def _rewind_files(
        repo: ShadowRepo, since: list[CheckpointRecord], dry_run: bool, force: bool
    ) -> tuple[FilesPlan, str, str | None]:
        now = repo.snapshot("rewind-now", "the workspace at a rewind")
        target = since[0].before
        user: set[str] = set()
        for turn, following in zip(since, [*since[1:], None], strict=True):
            after = turn.after or turn.before
            later = following.before if following is not None else now.commit
            user.update(repo.changed(after, later))
        differing = repo.changed(target, now.commit)
        held = repo.files(target)
        absent = [p for p in differing if p not in held]  # what a restore would delete
        there_before = since[0].left_out_paths() | repo.ignored_in(target, absent)
        differing = [p for p in differing if p in held or p not in there_before]
        conflicts = sorted(p for p in differing if p in user)
        restored = sorted(p for p in differing if force or p not in user)
        plan = FilesPlan(restored=restored, conflicts=[] if force else conflicts)
        if dry_run or not restored:
            return plan, now.commit, None
        repo.restore(target, restored)
        return plan, now.commit, repo.snapshot(f"rewind-{now.commit[:12]}", "after a rewind").commit

    # ------------------------------------------------------------------ conversations

    async def forget_session(self, session_id: str) -> None:
        """A deleted conversation's checkpoints go with it (the snapshots at the next prune)."""
        path = self._session_path(session_id)
        await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    async def copy_to(self, session_id: str, records: list[CheckpointRecord]) -> None:
        """A conversation rewound onto a new session keeps the checkpoints before the rewind."""
        stored = _SessionFile(checkpoints=records)
        await anyio.to_thread.run_sync(self._write, session_id, stored)

    # ------------------------------------------------------------------ storage

    def _repo(self, cwd: str) -> ShadowRepo:
        assert self.git is not None
        resolved = os.path.realpath(cwd)
        git_dir = self.root / "workspaces" / _key(resolved) / "git"
        repo = self._repos.get(str(git_dir))
        if repo is None:  # one per workspace for the bridge's life: it holds the watcher
            repo = self._repos[str(git_dir)] = ShadowRepo(self.git, git_dir, Path(resolved))
        return repo

    def _lock(self, repo: ShadowRepo) -> anyio.Lock:
        return self._locks.setdefault(str(repo.git_dir), anyio.Lock())

    def _session_path(self, session_id: str) -> Path:
        return self.root / "sessions" / f"{_key(session_id)}.json"

    def _read(self, session_id: str) -> _SessionFile:
        path = self._session_path(session_id)
        try:
            return _SessionFile.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return _SessionFile()
        except (OSError, ValidationError) as exc:
            log.warning("the checkpoints of session %s cannot be read (%s): starting afresh", session_id, exc)
            return _SessionFile()

    def _write(self, session_id: str, stored: _SessionFile) -> None:
        path = self._session_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = path.with_suffix(f".{os.getpid()}.{os.urandom(6).hex()}.tmp")
        temp.write_text(stored.model_dump_json())
        os.replace(temp, path)
