"""The agent-neutral permission core: a tool call, the mode and the rules give allow, ask or refuse."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from bridge.contract import PermissionMode, PermissionRule, ToolKind
from bridge.policy.shell_words import DenyMatch, deny_match, matches_allow, matches_exact

PLAN_REASON: Final = "plan mode: read-only"
CANNOT_ASK_REASON: Final = "approval needed; this client cannot answer"
DOUBT_REASON: Final = "the command's name cannot be known before it runs, and rule {} denies a command"

Decision = Literal["allow", "ask", "refuse"]
DecidedBy = Literal["rule", "mode"]


@dataclass(frozen=True)
class ToolCall:
    """What the permission core needs of one tool call: its tool, kind and the command or path."""

    tool: str  # the agent's own name for it: rules name tools so
    kind: ToolKind
    command: str | None = None
    path: str | None = None
    session_id: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What happens to a tool call, what decided it and, for a refusal, the reason given."""

    # "ask": the caller asks the client, then settles the call itself.
    decision: Decision
    by: DecidedBy
    reason: str | None = None
    # The rule that decided, when `by` is "rule".
    rule: PermissionRule | None = None


def decide(
    call: ToolCall,
    mode: PermissionMode,
    cwd: str,
    rules: Iterable[PermissionRule],
    *,
    can_answer: bool,
) -> Verdict:
    """The verdict on `call` in `mode` for a run in `cwd` under `rules` (see the module's order)."""
    applicable = [rule for rule in rules if _applies(rule, call)]
    denied = _denied(call, cwd, applicable, mode, can_answer=can_answer)
    if denied is not None:
        return denied
    if mode == "full" or call.kind == "read":
        return Verdict("allow", "mode")
    if mode == "auto-edit" and call.kind == "edit" and call.path is not None and inside(call.path, cwd):
        return Verdict("allow", "mode")
    if mode == "plan":
        return Verdict("refuse", "mode", PLAN_REASON)
    for rule in applicable:
        if rule.decision == "allow" and _allow_matches(rule, call, cwd):
            return Verdict("allow", "rule", rule=rule)
    if can_answer:
        return Verdict("ask", "mode")
    return Verdict("refuse", "mode", CANNOT_ASK_REASON)


def _denied(
    call: ToolCall, cwd: str, rules: list[PermissionRule], mode: PermissionMode, *, can_answer: bool
) -> Verdict | None:
    """The verdict of the deny rules: a refusal on a match, and on a doubt too. A name that cannot
    be known (`r${x}m`, `$(…)`) is how a model would spell past the rule, and a user asked about
    it would be judging a spelling: the rule holds, and the model is told why."""
    doubt: PermissionRule | None = None
    for rule in rules:
        if rule.decision != "deny":
            continue
        found = _deny_matches(rule, call, cwd)
        if found == "match":
            return Verdict("refuse", "rule", f"denied by rule {rule.id}", rule)
        doubt = doubt or (rule if found == "doubt" else None)
    if doubt is None:
        return None
    return Verdict("refuse", "rule", DOUBT_REASON.format(doubt.id), doubt)


def inside(path: str, cwd: str) -> bool:
    """Whether `path` (relative to `cwd`) is inside `cwd` however an agent may read it.

    Symlinks are followed and `..` folded, for `cwd` too. Agents expand `~` and some strip a
    leading `@`: every reading must land inside.
    """
    root = os.path.realpath(cwd)
    return all(_is_under(resolved, root) for resolved in _readings(path, cwd))


def _readings(path: str, cwd: str) -> list[str]:
    """Each absolute, resolved path an agent could make of `path`."""
    spellings = {path, os.path.expanduser(path)}
    if path.startswith("@"):
        spellings |= {path[1:], os.path.expanduser(path[1:])}
    return [os.path.realpath(os.path.join(cwd, spelling)) for spelling in spellings]


def _lexical(path: str, cwd: str) -> str:
    """`path` made absolute and normalized without following symlinks."""
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _applies(rule: PermissionRule, call: ToolCall) -> bool:
    """Whether `rule` is about this tool and, for a session rule, this conversation."""
    if rule.tool not in ("*", call.tool):
        return False
    return rule.scope == "workspace" or rule.session_id == call.session_id


def _deny_matches(rule: PermissionRule, call: ToolCall, cwd: str) -> DenyMatch:
    """What a deny rule says of the call: its words (exact or prefix alike: a deny reads wide)
    anywhere in the command, a doubt about the command's name, or a path rule's match."""
    words = rule.match.command or rule.match.command_prefix
    if words is not None:
        return "no" if call.command is None else deny_match(call.command, words)
    return "match" if _path_matches(rule, call, cwd, deny=True) else "no"


def _allow_matches(rule: PermissionRule, call: ToolCall, cwd: str) -> bool:
    """Whether an allow rule covers the call: exactly its words, its words first (a prefix rule,
    labelled `X *`), or every reading of its path."""
    exact, prefix = rule.match.command, rule.match.command_prefix
    if exact is not None:
        return call.command is not None and matches_exact(call.command, exact)
    if prefix is not None:
        return call.command is not None and matches_allow(call.command, prefix)
    return _path_matches(rule, call, cwd, deny=False)


def _path_matches(rule: PermissionRule, call: ToolCall, cwd: str, *, deny: bool) -> bool:
    """Whether the call's path is what a path rule names; a deny reads any reading as a match."""
    glob = rule.match.path
    if glob is None or call.path is None:
        return False
    pattern = _glob_regex(glob, cwd)
    candidates = [*_readings(call.path, cwd), _lexical(call.path, cwd)]
    hits = [pattern.fullmatch(candidate) is not None for candidate in candidates]
    # Deny: any reading of the path (a symlink's name or its target); allow: every reading.
    return any(hits) if deny else all(hits)


def _glob_regex(glob: str, cwd: str) -> re.Pattern[str]:
    """A path glob as a regex over absolute paths: `**` any depth, `*` and `?` within one name.

    A relative glob is relative to the run's cwd (resolved).
    """
    base = glob if os.path.isabs(glob) else os.path.join(os.path.realpath(cwd), glob)
    out: list[str] = []
    index = 0
    while index < len(base):
        if base.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif base.startswith("**", index):
            out.append(".*")
            index += 2
        elif base[index] == "*":
            out.append("[^/]*")
            index += 1
        elif base[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(base[index]))
            index += 1
    return re.compile("".join(out), re.DOTALL)
