"""Asking the user about one tool call: the options offered, the diff shown, and the answer read."""

from __future__ import annotations

import logging
import os
import stat
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from bridge.agents.values import ProposedChange, ToolCheck
from bridge.contract import (
    OptionKind,
    PermissionOption,
    PermissionRule,
    ProposedDiff,
    RequestPermissionParams,
    RuleDecision,
    RuleMatch,
    ToolKind,
)
from bridge.engines.cancel import CancelToken
from bridge.policy.shell_words import plain_command_words

log = logging.getLogger(__name__)

ALLOW_ONCE: Final = "allow-once"
ALLOW_ALWAYS: Final = "allow-always"
#: The option whose rule allows the command's leading words with any words after (`X *`).
ALLOW_ALWAYS_PREFIX: Final = "allow-always-prefix"
REJECT_ONCE: Final = "reject-once"
REJECT_ALWAYS: Final = "reject-always"
#: Files larger than this are shown by path only: the diff would not help, reading it would cost.
MAX_DIFF_BYTES: Final = 1024 * 1024
MAX_TITLE: Final = 200
#: How much of a cut title's end is kept: a command's tail says what it finally does.
TITLE_TAIL: Final = 120
#: Leading words a prefix rule keeps at most (`git status *`, `npm run *`, `find . *`).
MAX_PREFIX_WORDS: Final = 2
#: Commands that run another command or code given as their argument: a prefix rule on one
#: (`env *`, `sh *`, `python *`) would allow anything, so none is offered.
_RUNS_ITS_ARGUMENTS: Final = frozenset(
    {
        "env", "command", "builtin", "exec", "eval", "nice", "nohup", "time", "timeout", "sudo",
        "doas", "su", "xargs", "sh", "bash", "dash", "zsh", "ksh", "ash", "fish", "busybox",
        "setsid", "stdbuf", "chroot", "flock", "watch", "strace", "python", "python3", "node",
        "perl", "ruby", "npx", "uvx", "ssh", "parallel", "awk", "sed",
    }
)  # fmt: skip
#: Characters a path glob gives a meaning to (permissions.py): a path holding one gets no rule.
_GLOB_CHARS: Final = frozenset("*?[]{}")


@dataclass(frozen=True)
class ApprovalRequest:
    """One tool call put to the user, with the options they may answer."""

    run_id: str
    session_id: str | None
    tool_call_id: str
    tool: str
    kind: ToolKind
    title: str
    input: Mapping[str, Any]
    diff: ProposedDiff | None
    options: tuple[PermissionOption, ...]
    #: The whole question, for a request that is no tool call (a front shows it as it is).
    message: str | None = None
    #: The whole command and the whole path the call names: what a front shows, never cut.
    command: str | None = None
    path: str | None = None

    def params(self) -> RequestPermissionParams:
        """The request as `pi/requestPermission` sends it."""
        return RequestPermissionParams(
            run_id=self.run_id,
            session_id=self.session_id,
            tool_call_id=self.tool_call_id,
            tool=self.tool,
            kind=self.kind,
            title=self.title,
            input=dict(self.input),
            diff=self.diff,
            options=list(self.options),
            command=self.command,
            path=self.path,
        )

    def whole(self) -> str:
        """The call as the user must read it before answering: the whole command (lines kept),
        or the tool and its whole path, or the title."""
        if self.command is not None:
            return self.command
        if self.path is not None:
            return f"{self.tool} {self.path}"
        return self.title

    def option(self, option_id: str | None) -> PermissionOption | None:
        """The offered option `option_id` names; None for anything else (never one made up)."""
        return next((option for option in self.options if option.option_id == option_id), None)


@dataclass(frozen=True)
class ApprovalAnswer:
    """The user's answer: the option chosen (None: no answer, cancelled) and a reject's message."""

    option_id: str | None = None
    message: str | None = None


CANCELLED: Final = ApprovalAnswer()

#: Puts one request to the user and returns the answer; cancelled, it withdraws the request.
Approver = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]


def title_of(check: ToolCheck) -> str:
    """A one-line title for the call: the command, or what the tool does to which path."""
    if check.command is not None:
        text = " ".join(check.command.split())
    elif check.path is not None:
        text = f"{check.tool} {check.path}"
    else:
        text = check.tool
    return one_line(text, MAX_TITLE)


def one_line(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole, or its start and its tail with the cut marked
    (" … ") between them, so what a command finally does is never the part left out."""
    if len(text) <= limit:
        return text
    tail = min(TITLE_TAIL, limit // 2)
    return text[: limit - tail - 3] + " … " + text[len(text) - tail :]


def options_for(check: ToolCheck, cwd: str) -> tuple[PermissionOption, ...]:
    """Allow once and reject once always; "always" options only when a rule can say exactly
    this call (a plain simple command's words, or a plain path), scoped to the workspace; a
    prefix rule only as its own option, labelled `X *`."""
    options = [PermissionOption(option_id=ALLOW_ONCE, kind="allow_once", name="Allow")]
    always = "in this workspace"
    words = plain_command_words(check.command) if check.command is not None else None
    deny: RuleMatch | None = None
    if words is not None:
        shown = " ".join(words)
        label = f"Always allow `{shown}` {always}"
        options.append(_always(ALLOW_ALWAYS, "allow_always", label, check, RuleMatch(command=words)))
        prefix = _prefix_of(words)
        if prefix is not None:
            label = f"Always allow `{' '.join(prefix)} *` {always}"
            options.append(
                _always(ALLOW_ALWAYS_PREFIX, "allow_always", label, check, RuleMatch(command_prefix=prefix))
            )
        deny, deny_label = RuleMatch(command_prefix=words), f"Always deny `{shown} *` {always}"
    elif check.command is None:
        path = _rule_path(check, cwd)
        if path is not None:
            shown = _shown_path(path, cwd)
            deny, deny_label = RuleMatch(path=path), f"Always deny `{shown}` {always}"
            options.append(
                _always(ALLOW_ALWAYS, "allow_always", f"Always allow `{shown}` {always}", check, deny)
            )
    options.append(PermissionOption(option_id=REJECT_ONCE, kind="reject_once", name="Deny"))
    if deny is not None:
        options.append(_always(REJECT_ALWAYS, "reject_always", deny_label, check, deny))
    return tuple(options)


def _prefix_of(words: list[str]) -> list[str] | None:
    """The leading words a prefix option offers: the command and its first operand words, up to
    the first option (`find . -maxdepth 0` gives `find .`); none for a command that runs others."""
    if os.path.basename(words[0]) in _RUNS_ITS_ARGUMENTS:
        return None
    prefix: list[str] = []
    for word in words[:MAX_PREFIX_WORDS]:
        if word.startswith("-"):
            break
        prefix.append(word)
    return prefix


def _shown_path(path: str, cwd: str) -> str:
    """A rule's path as the user reads it: relative to the workspace when it lies inside it (the
    rule itself keeps the whole resolved path)."""
    inside = os.path.relpath(path, cwd)
    return path if inside == os.pardir or inside.startswith(os.pardir + os.sep) else inside


def _always(
    option_id: str, kind: OptionKind, name: str, check: ToolCheck, match: RuleMatch
) -> PermissionOption:
    decision: RuleDecision = "allow" if kind == "allow_always" else "deny"
    rule = PermissionRule(
        id=f"{decision}-{uuid.uuid4().hex[:12]}",
        tool=check.tool,
        match=match,
        decision=decision,
        scope="workspace",
    )
    return PermissionOption(option_id=option_id, kind=kind, name=name, rule=rule)


def _rule_path(check: ToolCheck, cwd: str) -> str | None:
    """The one resolved path an edit's rule would name; None for a path a glob would misread."""
    if check.path is None or check.kind != "edit":
        return None
    path = os.path.normpath(os.path.join(cwd, check.path))
    return None if _GLOB_CHARS.intersection(path) or "\x00" in path else path


async def proposed_diff(
    change: ProposedChange | None, cwd: str, read: Callable[[str], str] | None = None
) -> ProposedDiff | None:
    """The diff `change` would make, the file read off the event loop (path only when it cannot be
    read: not a regular file, too large, not text, or kept out by `read`, the run's file access
    policy: /proc/self/environ is never shown)."""
    if change is None:
        return None
    return await anyio.to_thread.run_sync(_diff, change, cwd, read or _read_text)


def _diff(change: ProposedChange, cwd: str, read: Callable[[str], str]) -> ProposedDiff:
    path = os.path.join(cwd, change.path)
    try:
        old = read(path)
    except FileNotFoundError:
        old = None
    except (OSError, ValueError):
        return ProposedDiff(path=change.path)
    if change.content is not None:
        return ProposedDiff(path=change.path, old_text=old, new_text=change.content)
    if old is None:
        return ProposedDiff(path=change.path)
    new = old
    for before, after in change.replacements:
        if before not in old:
            return ProposedDiff(path=change.path, old_text=old)  # the edit would fail: no new text
        new = new.replace(before, after, 1)
    return ProposedDiff(path=change.path, old_text=old, new_text=new)


def _read_text(path: str) -> str:
    """A regular file's text; a FIFO, a device or a large file is never read (ValueError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DIFF_BYTES:
            raise ValueError("not a small regular file")
        return handle.read(MAX_DIFF_BYTES + 1).decode("utf-8")


async def ask(approver: Approver, request: ApprovalRequest, cancel: CancelToken) -> ApprovalAnswer:
    """The user's answer, or CANCELLED as soon as the run is cancelled (the approver's wait is
    cancelled then, and it withdraws its request).

    The cancel reaches the wait through the token's callback, in this task: no second task to
    start and tear down, so the request leaves on the call itself."""
    if cancel.cancelled:
        return CANCELLED
    answer = CANCELLED
    with anyio.CancelScope() as scope:
        take_back = cancel.on_cancel(scope.cancel)
        try:
            answer = await approver(request)
        except Exception:  # a front that broke while asking: no answer, nothing runs
            log.exception("asking about tool call %s failed", request.tool_call_id)
        finally:
            take_back()
    return CANCELLED if cancel.cancelled else answer  # an answer racing the cancel runs nothing
