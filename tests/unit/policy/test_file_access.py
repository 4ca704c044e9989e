"""The file access policy (bridge/policy/file_access.py): what an agent's own file tools may touch.

Every case is judged from the disk: what was read, what exists and what it holds afterwards.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest

from bridge.agents.values import ProposedChange
from bridge.policy.approvals import proposed_diff
from bridge.policy.file_access import AGENT_CONFIG, FileAccess, Refused, resolve


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    (home / ".profile").write_text("profile\n")
    (home / "state").mkdir()
    (home / "state" / "rules.json").write_text("{}")
    return home


@pytest.fixture
def work(home: Path) -> Path:
    work = home / "work"
    work.mkdir()
    (work / "a.txt").write_text("hello\n")
    return work


def access(work: Path, home: Path, mode: str = "off") -> FileAccess:
    return FileAccess.of(str(work), mode, [str(home / ".ssh"), str(home / "state")])


@pytest.mark.parametrize("mode", ["off", "read-only", "workspace-write"])
def test_reads_inside_the_workspace_return_the_bytes(work: Path, home: Path, mode: str) -> None:
    assert access(work, home, mode).read_bytes(str(work / "a.txt")) == b"hello\n"
    assert access(work, home, mode).read_bytes("a.txt") == b"hello\n"


@pytest.mark.parametrize(
    "path",
    ["/proc/self/environ", "/proc/1/cmdline", "/sys/kernel/hostname", "/dev/zero", "/dev/fd/0"],
)
@pytest.mark.parametrize("mode", ["off", "workspace-write"])
def test_kernel_trees_are_kept_out(work: Path, home: Path, path: str, mode: str) -> None:
    with pytest.raises(Refused, match="hidden from"):
        access(work, home, mode).read_bytes(path)
    with pytest.raises(Refused):
        access(work, home, mode).write_bytes(path, b"x")


@pytest.mark.parametrize("mode", ["off", "read-only", "workspace-write"])
def test_secrets_and_the_state_dir_are_kept_out_of_reads_and_writes(
    work: Path, home: Path, mode: str
) -> None:
    policy = access(work, home, mode)
    for path in (home / ".ssh" / "id_rsa", home / "state" / "rules.json", home / "state"):
        with pytest.raises(Refused, match="hidden from"):
            policy.read_bytes(str(path))
        with pytest.raises(Refused):
            policy.write_bytes(str(path / "x" if path.is_dir() else path), b"pwned")
    with pytest.raises(Refused):
        policy.listdir(str(home / ".ssh"))
    assert (home / ".ssh" / "id_rsa").read_text() == "PRIVATE KEY"
    assert (home / "state" / "rules.json").read_text() == "{}"


def test_dotdot_and_a_symlinked_dir_reach_the_secret_still_refused(work: Path, home: Path) -> None:
    (work / "keys").symlink_to(home / ".ssh")
    policy = access(work, home)
    with pytest.raises(Refused):
        policy.read_bytes(str(work / ".." / ".ssh" / "id_rsa"))
    with pytest.raises(Refused):
        policy.read_bytes("keys/id_rsa")
    with pytest.raises(Refused):
        policy.read_bytes("../.ssh/id_rsa")


def test_a_symlink_leaving_the_workspace_is_refused_at_any_component(work: Path, home: Path) -> None:
    (home / "outside").mkdir()
    (home / "outside" / "f").write_text("out")
    (work / "out").symlink_to(home / "outside")
    (work / "sub").mkdir()
    (work / "sub" / "link").symlink_to(work / "a.txt")
    policy = access(work, home)
    with pytest.raises(Refused, match="leads out of the workspace"):
        policy.read_bytes("out/f")
    assert policy.read_bytes("sub/link") == b"hello\n"  # inside to inside is fine


def test_a_dangling_symlink_write_is_judged_by_its_target(work: Path, home: Path) -> None:
    (work / "link").symlink_to(home / ".profile.new")
    with pytest.raises(Refused):
        access(work, home, "workspace-write").write_bytes("link", b"pwned")
    assert not (home / ".profile.new").exists()
    (work / "link2").symlink_to(home / ".profile")
    with pytest.raises(Refused):
        access(work, home, "workspace-write").write_bytes("link2", b"pwned")
    assert (home / ".profile").read_text() == "profile\n"


def test_workspace_write_writes_inside_only(work: Path, home: Path) -> None:
    policy = access(work, home, "workspace-write")
    policy.mkdir(str(work / "new" / "deep"))
    policy.write_bytes(str(work / "new" / "deep" / "f.txt"), b"made")
    assert (work / "new" / "deep" / "f.txt").read_bytes() == b"made"
    with pytest.raises(Refused, match="outside the workspace"):
        policy.write_bytes(str(home / "pwned.txt"), b"x")
    with pytest.raises(Refused):
        policy.mkdir(str(home / "newdir"))
    assert not (home / "pwned.txt").exists() and not (home / "newdir").exists()


def test_read_only_writes_nothing(work: Path, home: Path) -> None:
    with pytest.raises(Refused, match="read-only"):
        access(work, home, "read-only").write_bytes("a.txt", b"x")
    assert (work / "a.txt").read_text() == "hello\n"


@pytest.mark.parametrize("name", [*AGENT_CONFIG, ".pi/extensions/evil.ts", ".git/hooks/pre-commit"])
def test_agent_config_is_read_only_under_a_sandbox(work: Path, home: Path, name: str) -> None:
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    with pytest.raises(Refused, match="agent config"):
        access(work, home, "workspace-write").write_bytes(name, b"x")
    assert access(work, home, "workspace-write").is_agent_config(str(work / name))
    assert not (work / name).is_file()


def test_without_a_sandbox_writes_go_anywhere_not_kept_out(work: Path, home: Path) -> None:
    assert access(work, home).write_bytes(str(home / "note.txt"), b"ok", keep=10).existed is False
    assert (home / "note.txt").read_text() == "ok"


def test_a_write_tells_what_the_file_held(work: Path, home: Path) -> None:
    original = access(work, home).write_bytes("a.txt", b"new", keep=100)
    assert (original.existed, original.data) == (True, b"hello\n")
    assert (work / "a.txt").read_bytes() == b"new"
    assert access(work, home).write_bytes("a.txt", b"newer", keep=2).data is None  # too big to keep


def test_fifos_and_devices_are_never_opened_for_read(work: Path, home: Path) -> None:
    os.mkfifo(work / "fifo")
    with pytest.raises(Refused, match="not a regular file"):
        access(work, home).read_bytes("fifo")


def test_a_symlink_swapped_into_a_component_after_judging_is_refused(
    work: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the path is judged clean, then a component becomes a symlink to the secrets
    before the open. The walk with O_NOFOLLOW refuses it (a check-then-open would follow it)."""
    (work / "dir").mkdir()
    (work / "dir" / "id_rsa").write_text("harmless")
    policy = access(work, home)
    real = policy.judge_read("dir/id_rsa")
    original = FileAccess.judge_read

    def judge_then_swap(self: FileAccess, path: str) -> str:
        judged = original(self, path)
        (work / "dir").rename(work / "dir.old")
        (work / "dir").symlink_to(home / ".ssh")
        return judged

    monkeypatch.setattr(FileAccess, "judge_read", judge_then_swap)
    with pytest.raises(Refused, match="symlink"):
        policy.read_bytes(real)


def test_a_symlink_swapped_for_the_leaf_of_a_write_is_refused(
    work: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = access(work, home, "workspace-write")
    original = FileAccess.judge_write

    def judge_then_swap(self: FileAccess, path: str) -> str:
        judged = original(self, path)
        (work / "target").symlink_to(home / ".profile")
        return judged

    monkeypatch.setattr(FileAccess, "judge_write", judge_then_swap)
    with pytest.raises(Refused, match="symlink"):
        policy.write_bytes("target", b"pwned")
    assert (home / ".profile").read_text() == "profile\n"


def test_racing_symlink_swaps_never_leak_the_secret(work: Path, home: Path) -> None:
    """A thread flips a component between a dir and a symlink to ~/.ssh while reads run."""
    (work / "d").mkdir()
    (work / "d" / "id_rsa").write_text("harmless")
    (work / "real").mkdir()
    (work / "real" / "id_rsa").write_text("harmless")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            os.rename(work / "d", work / "d.x")
            os.symlink(home / ".ssh", work / "d")
            os.unlink(work / "d")
            os.rename(work / "d.x", work / "d")

    thread = threading.Thread(target=flip)
    thread.start()
    seen: set[bytes] = set()
    try:
        policy = access(work, home)
        for _ in range(500):
            try:
                seen.add(policy.read_bytes("d/id_rsa"))
            except OSError:  # refused, or missing for an instant
                pass
    finally:
        stop.set()
        thread.join(timeout=10)
    assert b"PRIVATE KEY" not in seen


def test_resolve_folds_dotdot_and_follows_links(work: Path, home: Path) -> None:
    (work / "l").symlink_to("sub/../a.txt")
    (work / "sub").mkdir()
    real, links = resolve("l", str(work))
    assert real == str(work / "a.txt")
    assert links == [(str(work / "l"), str(work / "a.txt"))]


def test_a_symlink_loop_is_refused(work: Path, home: Path) -> None:
    (work / "x").symlink_to("y")
    (work / "y").symlink_to("x")
    with pytest.raises(Refused, match="symbolic links"):
        access(work, home).read_bytes("x")


def test_grep_root_holding_a_kept_out_tree_is_refused(work: Path, home: Path) -> None:
    policy = access(work, home)
    assert policy.judge_search(str(work)) == str(work)
    with pytest.raises(Refused, match="holds"):
        policy.judge_search(str(home))


def test_kind_and_listdir(work: Path, home: Path) -> None:
    policy = access(work, home)
    assert policy.kind("a.txt") == "file"
    assert policy.kind(".") == "dir"
    assert policy.kind("missing") == "missing"
    (work / "d").mkdir()
    assert sorted(policy.listdir(".")) == ["a.txt", "d/"]


def test_an_approval_diff_read_through_the_policy_never_shows_a_kept_out_file(work: Path, home: Path) -> None:
    """Item 9: the approval's diff of an edit of /proc/self/environ or a secret shows the path only."""
    policy = access(work, home)
    reader = lambda path: policy.read_text(path, 1 << 20)  # noqa: E731
    for path in ("/proc/self/environ", str(home / ".ssh" / "id_rsa")):
        change = ProposedChange(path, replacements=(("PATH", "x"), ("PRIVATE", "x")))
        diff = anyio.run(proposed_diff, change, str(work), reader)
        assert diff is not None and diff.old_text is None and diff.new_text is None, diff
    inside = anyio.run(proposed_diff, ProposedChange("a.txt", content="new\n"), str(work), reader)
    assert inside is not None and inside.old_text == "hello\n"
