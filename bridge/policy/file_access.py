"""The one policy for every file an agent's own tools read or write, and the I/O that holds it."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

#: The kernel's trees: never a file of the workspace, and /proc/self/environ holds every key.
KERNEL_TREES: Final = ("/proc", "/sys", "/dev")
#: The workspace's files that configure an agent or run code later (relative to the workspace).
AGENT_CONFIG: Final = (".pi", ".claude", ".mcp.json", ".git/hooks", ".git/config", ".vscode", ".idea")
#: Past this a read is refused: the whole file travels to the agent in one answer.
MAX_READ_BYTES: Final = 64 * 1024 * 1024
#: Symlinks followed for one path before it is refused (the kernel's own bound).
_MAX_LINKS: Final = 40

Writes = Literal["anywhere", "workspace", "none"]


@dataclass(frozen=True, slots=True)
class Original:
    """What a written file held before: whether it existed, and its bytes when they were kept."""

    existed: bool
    data: bytes | None = None


class Refused(PermissionError):
    """The operation is not allowed, or failed; the message is the one the model is given.

    A missing file is FileNotFoundError instead, so a caller can tell "not there" apart."""


@dataclass(frozen=True, slots=True)
class FileAccess:
    """What one run's agent may read and write."""

    #: The run's folder, symlinks resolved.
    workspace: str
    writes: Writes
    #: Absolute paths kept out of reads and writes (each as given and resolved).
    kept_out: tuple[str, ...]

    @classmethod
    def of(cls, cwd: str, sandbox_mode: str, kept_out: Iterable[str]) -> FileAccess:
        """The access of a run in `cwd` under sandbox mode `off`, `read-only` or `workspace-write`."""
        writes: Writes = {"read-only": "none", "workspace-write": "workspace"}.get(sandbox_mode, "anywhere")  # type: ignore[assignment]
        paths = {*KERNEL_TREES, *kept_out}
        every = {os.path.normpath(p) for p in paths if os.path.isabs(p)}
        every |= {os.path.realpath(p) for p in every}
        return cls(os.path.realpath(cwd), writes, tuple(sorted(every)))

    # -- judging ----------------------------------------------------------------------------

    def resolve(self, path: str) -> str:
        """`path` (relative to the workspace) with every symlink followed, a dangling one by its
        target; Refused when a symlink inside the workspace leads out of it."""
        real, links = resolve(path, self.workspace)
        for where, target in links:
            if within(where, self.workspace) and not within(target, self.workspace):
                raise Refused(f"refused: {path}: the symlink {where} leads out of the workspace")
        return real

    def kept_out_reason(self, real: str) -> str | None:
        """Why `real` (resolved) may never be read or written; None: it may be."""
        for tree in self.kept_out:
            if within(real, tree):
                return f"refused: {real} is hidden from the agent's tools"
        return None

    def is_agent_config(self, real: str) -> bool:
        """Whether `real` (resolved) is the workspace's agent config or hooks."""
        return any(within(real, os.path.join(self.workspace, name)) for name in AGENT_CONFIG)

    def judge_read(self, path: str) -> str:
        """The resolved path a read of `path` opens; Refused when it may not."""
        real = self.resolve(path)
        reason = self.kept_out_reason(real)
        if reason:
            raise Refused(reason)
        return real

    def judge_search(self, path: str) -> str:
        """A read of a whole tree (grep): the tree itself, and nothing kept out inside it."""
        real = self.judge_read(path)
        for tree in self.kept_out:
            if within(tree, real) and tree != real:
                raise Refused(f"refused: {real} holds {tree}, which is hidden from the agent's tools")
        return real

    def judge_write(self, path: str) -> str:
        """The resolved path a write of `path` opens; Refused when it may not."""
        real = self.judge_read(path)
        if self.writes == "none":
            raise Refused(f"sandbox: {real} may not be changed: the sandbox is read-only")
        if self.writes == "workspace":
            if not within(real, self.workspace):
                raise Refused(
                    f"sandbox: {real} may not be changed: it is outside the workspace {self.workspace}"
                )
            if self.is_agent_config(real):
                raise Refused(
                    f"sandbox: {real} is the workspace's agent config or hooks, read-only in the sandbox"
                )
        return real

    # -- I/O --------------------------------------------------------------------------------

    def read_bytes(self, path: str, limit: int = MAX_READ_BYTES) -> bytes:
        """A regular file's bytes (never a FIFO or a device); Refused past `limit`."""
        real = self.judge_read(path)
        with _opened(real, os.O_RDONLY | os.O_NONBLOCK) as fd:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused(f"refused: {real} is not a regular file")
            if info.st_size > limit:
                raise Refused(f"refused: {real} is larger than {limit} bytes")
            chunks: list[bytes] = []
            size = 0
            while chunk := os.read(fd, 1 << 20):
                size += len(chunk)
                if size > limit:
                    raise Refused(f"refused: {real} is larger than {limit} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    def read_text(self, path: str, limit: int) -> str:
        """A small regular file's UTF-8 text (ValueError: not text); for diffs shown to the user."""
        return self.read_bytes(path, limit).decode("utf-8")

    def write_bytes(self, path: str, data: bytes, *, keep: int = 0) -> Original:
        """Write `data` over the file (created if missing; its parent must exist). What it held
        before is returned when it was a text of at most `keep` bytes (for the change's diff)."""
        real = self.judge_write(path)
        parent, name = os.path.split(real)
        base = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        with _opened(parent, os.O_PATH | os.O_DIRECTORY) as dir_fd:
            fd, existed = -1, True
            for flags in (os.O_RDWR, os.O_WRONLY, os.O_WRONLY | os.O_CREAT | os.O_EXCL):
                try:
                    fd = os.open(name, flags | base, 0o666, dir_fd=dir_fd)
                    existed = not flags & os.O_CREAT
                    break
                except PermissionError as exc:
                    if flags != os.O_RDWR:
                        raise _refused(real, exc) from None
                except FileNotFoundError:
                    if flags & os.O_CREAT:
                        raise
                except OSError as exc:
                    raise _refused(real, exc) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused(f"refused: {real} is not a regular file")
            old = None
            if existed and keep > 0 and info.st_size <= keep:
                with contextlib.suppress(OSError):
                    old = os.pread(fd, keep + 1, 0)
            os.ftruncate(fd, 0)
            view = memoryview(data)
            offset = 0
            while offset < len(view):
                offset += os.pwrite(fd, view[offset:], offset)
        finally:
            os.close(fd)
        return Original(existed, old if old is not None and len(old) <= keep else None)

    def mkdir(self, path: str) -> None:
        """Make `path` and its missing parents, each one inside the judged path."""
        real = self.judge_write(path)
        with _Walk(real) as walk:
            for name in _parts(real):
                try:
                    os.mkdir(name, 0o777, dir_fd=walk.fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _refused(real, exc) from None
                walk.step(name)

    def access(self, path: str, *, write: bool = False) -> None:
        """Refused unless `path` is a file that may be read (and written)."""
        real = self.judge_write(path) if write else self.judge_read(path)
        with _opened(real, os.O_PATH) as fd:
            mode = os.R_OK | (os.W_OK if write else 0)
            if not os.access(f"/proc/self/fd/{fd}", mode):
                raise Refused(f"refused: {real}: permission denied")

    def kind(self, path: str) -> Literal["file", "dir", "other", "missing"]:
        """What `path` is (never following a symlink the policy refuses)."""
        real = self.judge_read(path)
        try:
            with _opened(real, os.O_PATH) as fd:
                mode = os.fstat(fd).st_mode
        except FileNotFoundError:
            return "missing"
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def listdir(self, path: str) -> list[str]:
        """The names in directory `path`, a directory's with a trailing `/`."""
        real = self.judge_read(path)
        with _opened(real, os.O_RDONLY | os.O_DIRECTORY) as fd, os.scandir(fd) as entries:
            return [entry.name + ("/" if entry.is_dir(follow_symlinks=False) else "") for entry in entries]


def within(path: str, root: str) -> bool:
    """Whether `path` is `root` or under it (both absolute and normalized)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(path: str, cwd: str) -> tuple[str, list[tuple[str, str]]]:
    """`path` made absolute against `cwd`, `..` folded and symlinks followed, a dangling one by
    its target; and each symlink crossed, as (where it is, where it points, made absolute)."""
    pending: list[str] = list(reversed(_split(os.path.join(cwd, path))))
    done = "/"
    links: list[tuple[str, str]] = []
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, name)
        try:
            info = os.lstat(here)
        except OSError:
            info = None
        if info is None or not stat.S_ISLNK(info.st_mode):
            done = here
            continue
        if len(links) >= _MAX_LINKS:
            raise Refused(f"refused: {path}: too many levels of symbolic links")
        target = os.readlink(here)
        links.append((here, os.path.normpath(os.path.join(done, target))))
        if os.path.isabs(target):
            done = "/"
        pending.extend(reversed(_split(target)))
    return done, links


def secret_paths(home: str | None, names: Sequence[str], files: Sequence[str]) -> list[str]:
    """The masked secrets under `home` and the agents' own files, as absolute paths."""
    paths = [os.path.join(home, name) for name in names] if home else []
    return [*paths, *(f for f in files if os.path.isabs(f))]


def _split(path: str) -> list[str]:
    return path.split("/")


def _parts(real: str) -> list[str]:
    return [name for name in real.split("/") if name]


def _lexists(real: str) -> bool:
    try:
        os.lstat(real)
    except OSError:
        return False
    return True


class _Walk:
    """A descriptor walked down from / one directory at a time, never through a symlink."""

    def __init__(self, real: str) -> None:
        self.real = real
        self.fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def step(self, name: str) -> None:
        """Go down into directory `name`."""
        try:
            fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            raise _refused(self.real, exc) from None
        os.close(self.fd)
        self.fd = fd

    def __enter__(self) -> _Walk:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


@contextlib.contextmanager
def _opened(real: str, flags: int) -> Iterator[int]:
    """`real` opened with `flags`, every component walked from / without following a symlink."""
    parts = _parts(real)
    with _Walk(real) as walk:
        for name in parts[:-1]:
            walk.step(name)
        leaf = parts[-1] if parts else "."
        try:
            opened = os.open(leaf, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=walk.fd)
        except OSError as exc:
            raise _refused(real, exc) from None
    try:
        yield opened
    finally:
        os.close(opened)


def _refused(real: str, exc: OSError) -> OSError:
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, f"no such file or directory: {real}")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _lexists(real):
        return Refused(f"refused: {real}: a symlink was put in its path")
    return Refused(f"{exc.strerror or exc}: {real}")
