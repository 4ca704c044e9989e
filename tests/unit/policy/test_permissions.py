"""The permission core: the contract's mode table, rules before asking, deny over allow, and
auto-edit's cwd resolved through symlinks and `..`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bridge import contract
from bridge.policy.permissions import CANNOT_ASK_REASON, PLAN_REASON, ToolCall, Verdict, decide, inside

READ = ToolCall("read", "read", path="a.txt")
EDIT_IN = ToolCall("edit", "edit", path="src/a.py")
EDIT_OUT = ToolCall("write", "edit", path="/etc/passwd")
BASH = ToolCall("bash", "execute", command="git status")
OTHER = ToolCall("mcp_thing", "other")


def rule(**fields: Any) -> contract.PermissionRule:
    base: dict[str, Any] = {"id": "r1", "tool": "bash", "decision": "allow", "scope": "workspace"}
    return contract.PermissionRule.model_validate({**base, **fields})


def verdict(
    call: ToolCall, mode: contract.PermissionMode, cwd: Path, rules: Any = (), can_answer: bool = True
) -> Verdict:
    return decide(call, mode, str(cwd), list(rules), can_answer=can_answer)


# mode -> call -> (decision, by, reason) with a client that can answer and no rules
TABLE: dict[str, dict[str, tuple[str, str, str | None]]] = {
    "ask": {
        "read": ("allow", "mode", None),
        "edit_in": ("ask", "mode", None),
        "edit_out": ("ask", "mode", None),
        "bash": ("ask", "mode", None),
        "other": ("ask", "mode", None),
    },
    "auto-edit": {
        "read": ("allow", "mode", None),
        "edit_in": ("allow", "mode", None),
        "edit_out": ("ask", "mode", None),
        "bash": ("ask", "mode", None),
        "other": ("ask", "mode", None),
    },
    "plan": {
        "read": ("allow", "mode", None),
        "edit_in": ("refuse", "mode", PLAN_REASON),
        "edit_out": ("refuse", "mode", PLAN_REASON),
        "bash": ("refuse", "mode", PLAN_REASON),
        "other": ("refuse", "mode", PLAN_REASON),
    },
    "full": {name: ("allow", "mode", None) for name in ("read", "edit_in", "edit_out", "bash", "other")},
}
CALLS = {"read": READ, "edit_in": EDIT_IN, "edit_out": EDIT_OUT, "bash": BASH, "other": OTHER}


@pytest.mark.parametrize("mode", list(TABLE))
@pytest.mark.parametrize("name", list(CALLS))
def test_the_mode_table_of_the_contract(mode: contract.PermissionMode, name: str, tmp_path: Path) -> None:
    got = verdict(CALLS[name], mode, tmp_path)
    assert (got.decision, got.by, got.reason) == TABLE[mode][name]


@pytest.mark.parametrize("mode", ["ask", "auto-edit"])
def test_a_call_that_would_ask_is_refused_when_the_client_cannot_answer(
    mode: contract.PermissionMode, tmp_path: Path
) -> None:
    got = verdict(BASH, mode, tmp_path, can_answer=False)
    assert (got.decision, got.by, got.reason) == ("refuse", "mode", CANNOT_ASK_REASON)
    assert verdict(READ, mode, tmp_path, can_answer=False).decision == "allow"


def test_an_allow_rule_answers_before_asking(tmp_path: Path) -> None:
    allow = rule(match={"commandPrefix": ["git", "status"]})
    got = verdict(BASH, "ask", tmp_path, [allow], can_answer=False)
    assert (got.decision, got.by, got.rule) == ("allow", "rule", allow)


def test_an_allow_rule_does_not_open_plan_mode(tmp_path: Path) -> None:
    allow = rule(match={"commandPrefix": ["git", "status"]})
    assert verdict(BASH, "plan", tmp_path, [allow]).decision == "refuse"


@pytest.mark.parametrize("mode", ["ask", "auto-edit", "plan", "full"])
def test_a_deny_rule_beats_an_allow_rule_in_every_mode(mode: contract.PermissionMode, tmp_path: Path) -> None:
    allow = rule(id="a", match={"commandPrefix": ["git"]})
    deny = rule(id="d", match={"commandPrefix": ["git", "status"]}, decision="deny")
    got = verdict(BASH, mode, tmp_path, [allow, deny])
    assert (got.decision, got.by, got.rule) == ("refuse", "rule", deny)
    assert got.reason == "denied by rule d"


def test_rules_name_their_tool_and_session_rules_their_conversation(tmp_path: Path) -> None:
    other_tool = rule(tool="shell", match={"commandPrefix": ["git"]})
    assert verdict(BASH, "ask", tmp_path, [other_tool]).decision == "ask"
    any_tool = rule(tool="*", match={"commandPrefix": ["git"]})
    assert verdict(BASH, "ask", tmp_path, [any_tool]).decision == "allow"
    session = rule(scope="session", sessionId="s1", match={"commandPrefix": ["git"]})
    assert verdict(BASH, "ask", tmp_path, [session]).decision == "ask"
    in_session = ToolCall("bash", "execute", command="git status", session_id="s1")
    assert verdict(in_session, "ask", tmp_path, [session]).decision == "allow"


def test_a_compound_command_never_matches_an_allow_rule(tmp_path: Path) -> None:
    allow = rule(match={"commandPrefix": ["git", "status"]})
    for command in (
        "git status; rm -rf /",
        "git status && rm x",
        "git status | sh",
        "git status > f",
        "git status $(rm x)",
        "git status `rm x`",
        "git status\nrm x",
        "git status &",
    ):
        call = ToolCall("bash", "execute", command=command)
        assert verdict(call, "ask", tmp_path, [allow]).decision == "ask", command


def test_a_model_written_command_does_not_widen_a_rule(tmp_path: Path) -> None:
    allow = rule(match={"commandPrefix": ["git", "status"]})
    widened = ToolCall("bash", "execute", command="git status --porcelain && rm -rf ~")
    assert verdict(widened, "ask", tmp_path, [allow]).decision == "ask"
    assert (
        verdict(ToolCall("bash", "execute", command="git statuses"), "ask", tmp_path, [allow]).decision
        == "ask"
    )
    assert verdict(ToolCall("bash", "execute", command="git"), "ask", tmp_path, [allow]).decision == "ask"
    assert allow.match.command_prefix == ["git", "status"]  # deciding never changes a rule


def test_a_path_rule_matches_resolved_paths_relative_to_the_cwd(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    allow = rule(tool="edit", match={"path": "docs/**"})
    assert verdict(ToolCall("edit", "edit", path="docs/a/b.md"), "ask", tmp_path, [allow]).decision == "allow"
    assert verdict(ToolCall("edit", "edit", path="src/a.py"), "ask", tmp_path, [allow]).decision == "ask"
    assert (
        verdict(ToolCall("edit", "edit", path="docs/../src/a.py"), "ask", tmp_path, [allow]).decision == "ask"
    )
    os.symlink("/etc", tmp_path / "docs" / "etc")
    assert (
        verdict(ToolCall("edit", "edit", path="docs/etc/passwd"), "ask", tmp_path, [allow]).decision == "ask"
    )


def test_a_deny_path_rule_catches_a_symlink_to_what_it_names(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    os.symlink(tmp_path / "secrets", tmp_path / "innocent")
    deny = rule(tool="*", decision="deny", match={"path": "secrets/**"})
    got = verdict(ToolCall("read", "read", path="innocent/key"), "full", tmp_path, [deny])
    assert got.decision == "refuse" and got.by == "rule"


def test_auto_edit_allows_inside_the_cwd_only_after_resolving(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", work / "link")
    os.symlink(work, tmp_path / "alias")

    def auto(path: str, cwd: Path = work) -> str:
        return verdict(ToolCall("edit", "edit", path=path), "auto-edit", cwd).decision

    assert auto("src/a.py") == "allow"
    assert auto(str(work / "new" / "file.txt")) == "allow"
    assert auto("src/../../outside/a.py") == "ask"
    assert auto("link/a.py") == "ask"  # a symlink out of the cwd
    assert auto("../work/src/a.py") == "allow"  # `..` that comes back in
    assert auto("/etc/passwd") == "ask"
    assert auto("~/.bashrc") == "ask"
    assert auto("@/etc/passwd") == "ask"  # an agent that strips a leading @
    assert auto("src/a.py", tmp_path / "alias") == "allow"  # the cwd itself through a symlink
    assert auto(str(work) + "-evil/a.py") == "ask"  # a sibling sharing the cwd's prefix
    assert verdict(ToolCall("edit", "edit"), "auto-edit", work).decision == "ask"  # no path


def test_inside_follows_a_symlinked_file(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("x")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(tmp_path / "outside.txt", work / "in.txt")
    assert not inside("in.txt", str(work))
    assert inside(".", str(work))


def test_rules_are_validated_with_clear_errors() -> None:
    bad = [
        {"id": "r", "tool": "bash", "match": {}, "decision": "allow", "scope": "workspace"},
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": ["a"], "path": "x"},
            "decision": "allow",
            "scope": "workspace",
        },
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": []},
            "decision": "allow",
            "scope": "workspace",
        },
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": ["a"]},
            "decision": "maybe",
            "scope": "workspace",
        },
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": ["a"]},
            "decision": "allow",
            "scope": "session",
        },
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": ["a"]},
            "decision": "allow",
            "scope": "workspace",
            "sessionId": "s",
        },
        {
            "id": "r",
            "tool": "bash",
            "match": {"commandPrefix": ["a"]},
            "decision": "allow",
            "scope": "workspace",
            "extra": 1,
        },
        {"id": "r", "tool": "bash", "match": {"regex": ".*"}, "decision": "allow", "scope": "workspace"},
    ]
    for raw in bad:
        with pytest.raises(ValueError):
            contract.PermissionRule.model_validate(raw)
    with pytest.raises(ValueError, match="given twice"):
        contract.SetPermissionsParams.model_validate(
            {"cwd": "/w", "rules": [bad[0] | {"match": {"path": "a"}}] * 2}
        )


def test_an_exact_rule_allows_its_command_and_no_other(tmp_path: Path) -> None:
    exact = rule(match={"command": ["find", ".", "-maxdepth", "0"]})
    assert verdict(
        ToolCall("bash", "execute", command="find . -maxdepth 0"), "ask", tmp_path, [exact]
    ).decision == ("allow")
    for other in (
        "find . -maxdepth 0 -exec rm {} ;",
        "find .",
        "find . -maxdepth 0; id",
        "find . -maxdepth '0'",
    ):
        call = ToolCall("bash", "execute", command=other)
        assert verdict(call, "ask", tmp_path, [exact]).decision == "ask", other


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build",
        "/bin/rm -rf build",
        '"r""m" -rf build',
        "\\rm -rf build",
        "'/usr/bin/rm' -rf build",
        'eval "r""m" -rf build',
        "sh -c 'rm -rf build'",
        "bash -lc 'cd x && rm -rf build'",
        "env rm -rf build",
        "env -i FOO=1 /bin/rm -rf build",
        "command rm -rf build",
        "xargs rm -rf build",
        "find . -name build -exec rm -rf {} +",
        "timeout 5 nice -n 2 rm -rf build",
        "sudo -u me rm -rf build",
        "echo ok; (cd sub && rm -rf build)",
    ],
)
@pytest.mark.parametrize("mode", ["ask", "auto-edit", "full"])
def test_a_deny_rule_matches_the_command_name_however_it_is_written(
    command: str, mode: contract.PermissionMode, tmp_path: Path
) -> None:
    deny = rule(id="no-rm", decision="deny", match={"commandPrefix": ["rm"]})
    allow = rule(id="yes", match={"commandPrefix": ["sh"]})
    decided = verdict(ToolCall("bash", "execute", command=command), mode, tmp_path, [allow, deny])
    assert (decided.decision, decided.by, decided.rule) == ("refuse", "rule", deny), command


@pytest.mark.parametrize(
    "command",
    [
        "r${x}m -rf build",
        "$RM build",
        "$(echo rm) build",
        "`printf rm` x",
        "echo rm -rf x | sh",
        'eval "$cmd"',
        'sh -c "$cmd"',
        "/bin/r? x",
        "env $PROG x",
        "echo $'a'",
    ],
)
def test_a_command_whose_name_cannot_be_known_is_never_allowed_unasked_under_a_deny_rule(
    command: str, tmp_path: Path
) -> None:
    deny = rule(id="no-rm", decision="deny", match={"commandPrefix": ["rm"]})
    call = ToolCall("bash", "execute", command=command)
    allow_all = rule(id="all", tool="*", match={"commandPrefix": [command.split(maxsplit=1)[0]]})
    for mode in ("ask", "auto-edit", "full"):
        decided = verdict(call, mode, tmp_path, [deny, allow_all])
        assert decided.decision in ("ask", "refuse"), (command, mode, decided)
        assert verdict(call, mode, tmp_path, [deny], can_answer=False).decision == "refuse"
    assert verdict(call, "plan", tmp_path, [deny]).decision == "refuse"


def test_a_deny_rule_leaves_other_commands_alone(tmp_path: Path) -> None:
    deny = rule(id="no-rm", decision="deny", match={"commandPrefix": ["rm"]})
    for command in ("ls -la", "git status", "echo $HOME", "cat rm.txt", "bash build.sh", "grep -r rmdir ."):
        call = ToolCall("bash", "execute", command=command)
        assert verdict(call, "full", tmp_path, [deny]).decision == "allow", command
