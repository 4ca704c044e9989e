"""Project trust without an agent: what pi would need a decision for, and the saved decisions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bridge.agents.pi.trust import PROTECTED_IN_CONFIG_DIR, protected_resources, trust_flags
from bridge.cli import main
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.policy.trust.trust_store import TrustStore


def test_a_bare_or_absent_pi_folder_needs_no_decision(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path / "home")}
    assert protected_resources(str(tmp_path), home) == ()
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "sessions").mkdir()  # not one of pi's protected entries
    assert protected_resources(str(tmp_path), home) == ()


@pytest.mark.parametrize("entry", PROTECTED_IN_CONFIG_DIR)
def test_each_protected_entry_of_pi_folder_is_named(tmp_path: Path, entry: str) -> None:
    target = tmp_path / ".pi" / entry
    target.parent.mkdir()
    if "." in entry:
        target.write_text("{}")
    else:
        target.mkdir()  # an empty folder counts, as pi counts it
    assert protected_resources(str(tmp_path), {"HOME": str(tmp_path / "home")}) == (f".pi/{entry}",)


def test_agents_skills_count_in_the_folder_and_above_but_not_the_users_own(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "home" / "src" / "app"
    work.mkdir(parents=True)
    (home / ".agents" / "skills").mkdir(parents=True)
    env = {"HOME": str(home)}
    assert protected_resources(str(work), env) == ()
    (tmp_path / "home" / "src" / ".agents" / "skills").mkdir(parents=True)
    assert protected_resources(str(work), env) == (str((home / "src" / ".agents" / "skills").resolve()),)
    (work / ".agents" / "skills").mkdir(parents=True)
    (work / ".pi" / "extensions").mkdir(parents=True)
    assert protected_resources(str(work), env)[:2] == (".pi/extensions", os.path.join(".agents", "skills"))


def test_a_symlinked_folder_is_looked_at_where_it_points(tmp_path: Path) -> None:
    (tmp_path / "real" / ".pi" / "prompts").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert protected_resources(str(tmp_path / "link"), {"HOME": str(tmp_path)}) == (".pi/prompts",)


def test_every_pi_gets_one_trust_flag() -> None:
    assert trust_flags(True) == ["--approve"] and trust_flags(False) == ["--no-approve"]


def test_decisions_are_saved_private_outside_the_workspace_and_per_resolved_folder(tmp_path: Path) -> None:
    store, work = TrustStore(tmp_path / "state"), tmp_path / "work"
    work.mkdir()
    (tmp_path / "alias").symlink_to(work)
    assert store.get(str(work)) is None
    store.set(str(work), "trusted", (".pi/prompts",))
    assert store.get(str(tmp_path / "alias")) == "trusted"
    path = store.path_for(str(work))
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(path.read_text())["resources"] == [".pi/prompts"]
    assert list(work.iterdir()) == []
    store.set(str(work), "untrusted")
    assert store.get(str(work)) == "untrusted"
    assert store.forget(str(work)) and store.get(str(work)) is None


@pytest.mark.parametrize(
    "spoil",
    [
        lambda path: path.write_text("not json"),
        lambda path: path.write_text(json.dumps({"cwd": "/elsewhere", "decision": "trusted"})),
        lambda path: path.write_text(json.dumps({"cwd": "?", "decision": "yes please"})),
        lambda path: path.chmod(0o666),
    ],
)
def test_a_file_that_cannot_be_believed_is_no_decision_never_a_trust(tmp_path: Path, spoil: object) -> None:
    store, work = TrustStore(tmp_path / "state"), tmp_path / "work"
    work.mkdir()
    store.set(str(work), "trusted")
    spoil(store.path_for(str(work)))  # type: ignore[operator]
    assert store.get(str(work)) is None


def test_the_trust_command_saves_shows_and_forgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    store = TrustStore(tmp_path / "state")
    assert main(["trust", str(work)]) == 0 and store.get(str(work)) == "trusted"
    assert main(["trust", "--never", str(work)]) == 0 and store.get(str(work)) == "untrusted"
    assert main(["trust", "--show", str(work)]) == 0 and "untrusted" in capsys.readouterr().out
    assert main(["trust", "--forget", str(work)]) == 0 and store.get(str(work)) is None
    assert main(["trust", str(tmp_path / "missing")]) == 2


def test_claude_codes_project_files_and_its_flag_only_where_there_is_something_to_leave_out(
    tmp_path: Path,
) -> None:
    from bridge.agents.claude.trust import protected_resources as claude_resources
    from bridge.agents.claude.trust import trust_flags as claude_flags

    (tmp_path / "CLAUDE.md").write_text("instructions")
    assert claude_resources(str(tmp_path)) == () and claude_flags(False, str(tmp_path)) == []
    (tmp_path / ".mcp.json").write_text("{}")
    (tmp_path / ".claude" / "commands").mkdir(parents=True)
    assert claude_resources(str(tmp_path)) == (".claude/commands", ".mcp.json")
    assert claude_flags(False, str(tmp_path)) == ["--setting-sources", "user"]
    assert claude_flags(True, str(tmp_path)) == []


def _pi_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "work"
    (work / ".pi" / "prompts").mkdir(parents=True)
    (work / ".pi" / "prompts" / "greet.md").write_text("hello\n")
    (work / ".pi" / "settings.json").write_text("{}")
    return work, {"HOME": str(tmp_path / "home")}


def test_a_fingerprint_sees_added_removed_changed_and_relinked_config(tmp_path: Path) -> None:
    from bridge.agents.pi.trust import trust_roots
    from bridge.policy.trust.trust_store import changes, fingerprint

    work, env = _pi_folder(tmp_path)
    roots = trust_roots(str(work), env)
    seen = fingerprint(roots, str(work))
    assert set(seen) == {".pi", ".pi/prompts", ".pi/prompts/greet.md", ".pi/settings.json"}
    assert changes(seen, fingerprint(roots, str(work), seen)) == [], "nothing changed: the same"
    (work / "src.py").write_text("not config\n")
    assert changes(seen, fingerprint(roots, str(work), seen)) == [], "outside the roots: not covered"
    (work / ".pi" / "extensions").mkdir()
    (work / ".pi" / "extensions" / "evil.ts").write_text("export default () => {}\n")
    assert changes(seen, fingerprint(roots, str(work), seen)) == [
        "added .pi/extensions",
        "added .pi/extensions/evil.ts",
    ]
    (work / ".pi" / "extensions" / "evil.ts").unlink()
    (work / ".pi" / "extensions").rmdir()
    # Same size, and its mtime set back: the content's hash still tells.
    settings = work / ".pi" / "settings.json"
    stamp = settings.stat()
    settings.write_text("[]")
    os.utime(settings, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert changes(seen, fingerprint(roots, str(work), seen)) == ["changed .pi/settings.json"]
    settings.write_text("{}")
    assert changes(seen, fingerprint(roots, str(work), seen)) == [], "the same bytes again: the same"
    (work / ".pi" / "prompts" / "greet.md").unlink()
    (work / ".pi" / "prompts" / "greet.md").symlink_to(work / "src.py")
    assert changes(seen, fingerprint(roots, str(work), seen)) == ["changed .pi/prompts/greet.md"]


def test_a_trust_holds_only_while_the_config_is_as_the_user_saw_it(tmp_path: Path) -> None:
    from bridge.agents.pi import PiAgent
    from bridge.policy.trust.project_trust import ProjectTrust
    from bridge.policy.trust.trust_store import fingerprint

    work, env = _pi_folder(tmp_path)
    agent, store = PiAgent(), TrustStore(tmp_path / "state")
    roots = agent.trust_roots(str(work), env)
    store.set(str(work), "trusted", (".pi/prompts",), fingerprint(roots, str(work)))
    trust = ProjectTrust(store)
    assert trust.known(str(work), roots).trusted is True and trust.trusted_now(str(work), agent, env)
    (work / ".pi" / "extensions").mkdir()
    (work / ".pi" / "extensions" / "evil.ts").write_text("export default () => {}\n")
    known = trust.known(str(work), roots)
    assert known.trusted is None and "added .pi/extensions/evil.ts" in known.changed
    assert not trust.trusted_now(str(work), agent, env)
    store.set(str(work), "trusted")  # saved without a fingerprint (an older bridge): covers nothing
    assert trust.known(str(work), roots).trusted is None
    store.set(str(work), "untrusted")
    assert trust.known(str(work), roots).trusted is False, "never holds whatever changes"


def test_the_trust_command_records_what_it_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.agents.claude.trust import trust_roots as claude_roots
    from bridge.agents.pi.trust import trust_roots as pi_roots
    from bridge.policy.trust.project_trust import ProjectTrust

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work, env = _pi_folder(tmp_path)
    (work / ".mcp.json").write_text("{}")
    assert main(["trust", str(work)]) == 0
    trust = ProjectTrust(TrustStore(tmp_path / "state"))
    assert trust.known(str(work), pi_roots(str(work), env)).trusted is True
    assert trust.known(str(work), claude_roots(str(work))).trusted is True
    (work / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "sh"}}}')
    assert trust.known(str(work), claude_roots(str(work))).changed == ("changed .mcp.json",)
    assert trust.known(str(work), pi_roots(str(work), env)).trusted is True, "pi's part is unchanged"
