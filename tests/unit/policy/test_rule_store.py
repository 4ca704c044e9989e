"""The workspace rule store: a round trip in 0600/0700, atomic writes, all or none of a file, and
never a byte under the workspace."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from bridge import contract
from bridge.policy.rule_store import STATE_DIR_ENV, RuleStore, RuleStoreError, state_dir
from tests.support.env import ROOT

WORKSPACE_RULE: dict[str, Any] = {
    "id": "git-status",
    "tool": "bash",
    "match": {"commandPrefix": ["git", "status"]},
    "decision": "allow",
    "scope": "workspace",
}
SESSION_RULE: dict[str, Any] = {
    "id": "edits",
    "tool": "edit",
    "match": {"path": "src/**"},
    "decision": "allow",
    "scope": "session",
    "sessionId": "s1",
}


def rules(*raw: dict[str, Any]) -> list[contract.PermissionRule]:
    return [contract.PermissionRule.model_validate(item) for item in raw]


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mode, p.stat().st_size) for p in sorted(directory.rglob("*"))}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "README").write_text("hi")
    return path


@pytest.fixture
def store(tmp_path: Path) -> RuleStore:
    return RuleStore(tmp_path / "state" / "pi-bridge")


def test_the_state_dir_is_the_override_then_xdg_then_home() -> None:
    assert state_dir({STATE_DIR_ENV: "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}) == Path("/s")
    assert state_dir({"XDG_STATE_HOME": "/x", "HOME": "/h"}) == Path("/x/pi-bridge")
    assert state_dir({"XDG_STATE_HOME": "relative", "HOME": "/h"}) == Path("/h/.local/state/pi-bridge")


def test_round_trip_in_private_files_outside_the_workspace(store: RuleStore, workspace: Path) -> None:
    before = snapshot(workspace)
    assert store.rules(str(workspace)) == []
    stored = store.replace(str(workspace), rules(WORKSPACE_RULE, SESSION_RULE))
    assert stored == rules(WORKSPACE_RULE, SESSION_RULE)
    assert RuleStore(store.root).rules(str(workspace)) == rules(WORKSPACE_RULE)  # session rules: memory only
    path = store.path_for(str(workspace))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert json.loads(path.read_text())["cwd"] == os.path.realpath(workspace)
    assert snapshot(workspace) == before
    assert store.replace(str(workspace), []) == []
    assert store.rules(str(workspace)) == []


def test_a_workspace_is_one_file_whatever_path_names_it(
    store: RuleStore, workspace: Path, tmp_path: Path
) -> None:
    os.symlink(workspace, tmp_path / "alias")
    store.replace(str(workspace), rules(WORKSPACE_RULE))
    assert store.rules(str(tmp_path / "alias")) == rules(WORKSPACE_RULE)
    assert store.rules(str(workspace / "." / "..")) == []  # another workspace


def broken(store: RuleStore, workspace: Path, content: bytes | None = None, mode: int | None = None) -> Path:
    store.replace(str(workspace), rules(WORKSPACE_RULE))
    path = store.path_for(str(workspace))
    if content is not None:
        path.write_bytes(content)
    if mode is not None:
        path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("content", "mode", "problem"),
    [
        (b'{"version": 1, "cwd": ', None, "is not valid JSON"),
        (b"\xff\xfe", None, "is not valid JSON"),
        (b'{"version": 1, "rules": []}', None, "does not follow the rule schema"),
        (b'{"version": 2, "cwd": "/", "rules": []}', None, "does not follow the rule schema"),
        (None, 0o620, "is writable by group or others"),
        (None, 0o602, "is writable by group or others"),
    ],
)
def test_a_bad_file_is_a_clear_error_and_none_of_its_rules_apply(
    store: RuleStore, workspace: Path, content: bytes | None, mode: int | None, problem: str
) -> None:
    path = broken(store, workspace, content, mode)
    with pytest.raises(RuleStoreError, match=problem) as caught:
        store.rules(str(workspace))
    assert str(path) in str(caught.value)


def test_one_bad_rule_spoils_the_whole_file(store: RuleStore, workspace: Path) -> None:
    path = broken(store, workspace)
    document = json.loads(path.read_text())
    document["rules"].append({**WORKSPACE_RULE, "id": "bad", "decision": "sometimes"})
    path.write_text(json.dumps(document))
    with pytest.raises(RuleStoreError, match=r"rules\.1\.decision"):
        store.rules(str(workspace))


def test_a_file_for_another_workspace_or_with_session_rules_is_refused(
    store: RuleStore, workspace: Path
) -> None:
    path = broken(store, workspace)
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "cwd": "/elsewhere"}))
    with pytest.raises(RuleStoreError, match="is for '/elsewhere'"):
        store.rules(str(workspace))
    path.write_text(json.dumps({**document, "rules": [SESSION_RULE]}))
    with pytest.raises(RuleStoreError, match="holds a session rule"):
        store.rules(str(workspace))


def test_a_writable_directory_or_a_symlinked_file_is_refused(
    store: RuleStore, workspace: Path, tmp_path: Path
) -> None:
    path = broken(store, workspace)
    path.parent.chmod(0o770)
    with pytest.raises(RuleStoreError, match=r"rule directory .* is writable by group or others"):
        store.rules(str(workspace))
    with pytest.raises(RuleStoreError, match="writable by group or others"):
        store.replace(str(workspace), [])
    path.parent.chmod(0o700)
    target = tmp_path / "planted.json"
    target.write_bytes(path.read_bytes())
    target.chmod(0o600)
    path.unlink()
    os.symlink(target, path)
    with pytest.raises(RuleStoreError, match="cannot be opened"):
        store.rules(str(workspace))


def test_a_replace_repairs_a_broken_file(store: RuleStore, workspace: Path) -> None:
    broken(store, workspace, b"not json", 0o666)
    assert store.replace(str(workspace), rules(WORKSPACE_RULE)) == rules(WORKSPACE_RULE)
    assert stat.S_IMODE(store.path_for(str(workspace)).stat().st_mode) == 0o600


def test_a_file_of_another_user_is_refused(
    store: RuleStore, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken(store, workspace)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(store.root).st_uid + 1)
    with pytest.raises(RuleStoreError, match="not by this user"):
        store.rules(str(workspace))


def test_set_permissions_is_the_only_writer() -> None:
    # Nothing in bridge/ but the LSP front's pi/setPermissions handler replaces rules.
    root = ROOT / "bridge"
    writers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "replace_async(" in path.read_text()
        or ".replace(params.cwd" in path.read_text()
        or "rule_store.replace(" in path.read_text()
    )
    assert writers == ["fronts/lsp/server.py", "policy/rule_store.py"]


async def test_a_read_is_kept_until_the_file_or_its_directories_change(
    store: RuleStore, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = str(workspace)
    store.replace(cwd, rules(WORKSPACE_RULE))
    reads: list[str] = []
    read = store.workspace_rules

    def counted(cwd: str) -> list[contract.PermissionRule]:
        reads.append(cwd)
        return read(cwd)

    monkeypatch.setattr(store, "workspace_rules", counted)
    assert [r.id for r in await store.rules_async(cwd)] == ["git-status"]
    assert [r.id for r in await store.rules_async(cwd)] == ["git-status"]
    assert len(reads) == 1, "the second decision reads no file"

    path = store.path_for(cwd)  # another bridge process replaces the file
    document = json.loads(path.read_text())
    document["rules"].append({**WORKSPACE_RULE, "id": "second"})
    path.write_text(json.dumps(document))
    assert [r.id for r in await store.rules_async(cwd)] == ["git-status", "second"]

    path.chmod(0o666)  # and then someone makes it writable by all: refused at once, never kept
    with pytest.raises(RuleStoreError, match="writable by group or others"):
        await store.rules_async(cwd)
    path.chmod(0o600)
    path.parent.chmod(0o777)
    with pytest.raises(RuleStoreError, match="rule directory"):
        await store.rules_async(cwd)
    path.parent.chmod(0o700)
    path.unlink()
    assert await store.rules_async(cwd) == []
