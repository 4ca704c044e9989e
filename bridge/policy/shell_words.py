"""Shell commands as words for permission rules: bashlex parses, and doubt never allows."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

#: Longer commands are never parsed: they never match an allow rule.
MAX_PARSED_CHARS: Final = 4096
#: Parses kept: a tool call's command is read by each rule and by the options offered, and a
#: parse costs far more than the rest of a decision.
PARSE_CACHE: Final = 256
# Raw text that is refused before parsing, even quoted: bashlex misreads some of it ($'..').
_NEVER_SIMPLE: Final = ("\n", "\r", "\x00", "`", "$(", "<(", ">(", "$'", '$"')
# Characters that make a leading word mean more than it says (globs, braces, escapes, expansions).
_SPECIAL_IN_PREFIX: Final = frozenset("*?[]{}~$`\\!'\"")
# The crude split for deny rules: whitespace, operators, quotes and escapes all separate words.
_CRUDE_SEPARATORS: Final = re.compile(r"[\s;&|()<>`$'\"\\{}]+")
#: What a deny rule says of a command: it is the denied one, it may be (its name is not known
#: without running the shell), or it is not.
DenyMatch = Literal["match", "doubt", "no"]
#: Commands that run their arguments as a command (`env rm`, `sudo rm`, `xargs rm`): every later
#: word may be the name of the command they run, so each is read as one (a deny reads wide).
_RUNNERS: Final = frozenset(
    {
        "env", "command", "builtin", "exec", "nice", "nohup", "time", "timeout", "sudo", "doas",
        "stdbuf", "setsid", "xargs", "ionice", "chrt", "taskset", "busybox", "unbuffer", "chroot",
        "flock", "watch", "strace", "ltrace", "runuser",
    }
)  # fmt: skip
#: Shells: `sh -c TEXT` runs TEXT; a shell with no script operand reads its commands from stdin.
_SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish", "rbash"})
#: find's actions that run a command, up to `;` or `+`.
_FIND_EXEC: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
#: How deep `eval` and `sh -c` texts are read inside each other before the rest is doubt.
_MAX_NESTING: Final = 4
#: Characters that make a command's name unknowable without running the shell.
_DYNAMIC_NAME: Final = frozenset("$`*?[")
#: What one deny check may spend: texts parsed (`eval`, `sh -c`) and words read. Past it the
#: rest is doubt (asked), so a hostile command cannot make a decision slow.
MAX_NESTED_PARSES: Final = 16
MAX_WORDS_READ: Final = 20_000


class _Budget:
    """What is left of one deny check's work (MAX_NESTED_PARSES, MAX_WORDS_READ)."""

    def __init__(self) -> None:
        self.parses = MAX_NESTED_PARSES
        self.words = MAX_WORDS_READ


def simple_command_words(command: str) -> list[str] | None:
    """The words of `command` if it is one plain simple command, else None."""
    words = _simple_command(command)
    return None if words is None else [word for word, _ in words]


def plain_command_words(command: str) -> list[str] | None:
    """The words of `command` if it is one simple command each of whose words is written as-is
    (no quoting, escaping or expansion): the only commands an allow rule can match."""
    words = _simple_command(command)
    if words is None or not all(_plain(word, raw) for word, raw in words):
        return None
    return [word for word, _ in words]


def matches_exact(command: str, wanted: Sequence[str]) -> bool:
    """Whether an exact allow rule of `wanted` covers `command`: the same plain words, no more."""
    words = _simple_command(command)
    if words is None or not wanted or len(words) != len(wanted):
        return False
    return all(word == want and _plain(word, raw) for (word, raw), want in zip(words, wanted, strict=True))


def matches_allow(command: str, prefix: Sequence[str]) -> bool:
    """Whether an allow rule of leading words `prefix` covers `command` (one plain simple command)."""
    words = _simple_command(command)
    if words is None or not prefix or len(words) < len(prefix):
        return False
    # Each matched word must be written as-is: no quoting, escaping or expansion that could make
    # bash read it differently from bashlex.
    return all(word == want and _plain(word, raw) for (word, raw), want in zip(words, prefix, strict=False))


def _plain(word: str, raw: str) -> bool:
    return word == raw and not _SPECIAL_IN_PREFIX.intersection(word)


def matches_deny(command: str, words: Sequence[str]) -> bool:
    """Whether a deny rule of `words` surely catches `command` (see `deny_match` for a doubt)."""
    return deny_match(command, words) == "match"


def deny_match(command: str, words: Sequence[str]) -> DenyMatch:
    """What a deny rule of `words` says of `command`: "match" when those words (the first read as
    a command name, its path dropped) appear in sequence in it, "doubt" when a command's name in
    it cannot be known statically, else "no"."""
    if not words:
        return "no"
    wanted = [_name(words[0]), *words[1:]]
    if _contains(_CRUDE_SEPARATORS.split(command), list(words)):
        return "match"
    doubt = False
    for found in _invocations(command, 0, _Budget()):
        if found is None:
            doubt = True
        elif _runs_in(found, wanted):
            return "match"
    return "doubt" if doubt else "no"


def _runs_in(found: list[str], wanted: list[str]) -> bool:
    """Whether `wanted` (a command name, then its words) occurs in `found` with any word there
    read as a command name: `sh -c /usr/bin/rm -rf x` holds `rm -rf` as surely as `rm -rf x`."""
    size = len(wanted)
    return any(
        _name(found[start]) == wanted[0] and found[start + 1 : start + size] == wanted[1:]
        for start in range(len(found) - size + 1)
    )


def _name(word: str) -> str:
    """A command word as the command it names: `/bin/rm` is `rm` (bash runs the same program)."""
    return os.path.basename(word) or word


def _invocations(command: str, depth: int, budget: _Budget) -> Iterator[list[str] | None]:
    """Each command `command` may run, as words from its name on (the name without its path);
    None for one whose name cannot be known without running the shell (or past the budget)."""
    budget.parses -= 1
    if (
        budget.parses < 0
        or depth > _MAX_NESTING
        or len(command) > MAX_PARSED_CHARS
        or "$'" in command
        or '$"' in command
    ):
        yield None
        return
    nodes = _parse(command)
    if nodes is None:
        yield None
        return
    for words in _command_words(command, nodes):
        yield from _unwrapped(words, depth, budget)


def _command_words(source: str, nodes: tuple[Any, ...]) -> Iterator[list[tuple[str, bool]]]:
    """(word, whether its text may expand) for each command bashlex finds, nested ones included;
    assignments and redirections are left out."""
    stack: list[Any] = list(nodes)
    while stack:
        node = stack.pop()
        if node.kind == "command":
            yield [
                (part.word, _may_expand(source[part.pos[0] : part.pos[1]], part))
                for part in node.parts
                if part.kind == "word"
            ]
        for field in ("parts", "list"):
            stack.extend(getattr(node, field, None) or ())
        for field in ("command", "output"):
            child = getattr(node, field, None)
            if child is not None and hasattr(child, "kind"):
                stack.append(child)


def _may_expand(raw: str, part: Any) -> bool:
    return bool(_DYNAMIC_NAME.intersection(raw)) or any(
        sub.kind != "tilde" for sub in getattr(part, "parts", ())
    )


def _unwrapped(
    words: list[tuple[str, bool]], depth: int, budget: _Budget, *, runner_args: bool = True
) -> Iterator[list[str] | None]:
    """The commands one simple command runs: itself, and what its runner, `eval`, `sh -c` or
    `find -exec` runs in turn. A runner's every later word is read as a command name once: with
    `runner_args` off (a suffix a runner already gave), a runner inside it is not read again, so
    `env env env …` costs its length, not two to its power."""
    if not words:
        return
    budget.words -= len(words)
    (first, dynamic), rest = words[0], words[1:]
    if dynamic or budget.words < 0:
        yield None
        return
    name = _name(first)
    yield [name, *(word for word, _ in rest)]
    if any(expands for _, expands in rest) and (name in _RUNNERS or name in _SHELLS or name == "eval"):
        yield None  # `env $x`, `sh -c "$x"`, `eval "$x"`: what runs is not written here
    if name in _RUNNERS:
        if runner_args:
            for start in range(len(rest)):
                yield from _unwrapped(rest[start:], depth, budget, runner_args=False)
    elif name == "eval":
        yield from _invocations(" ".join(word for word, _ in rest), depth + 1, budget)
    elif name in _SHELLS:
        yield from _shell_runs(rest, depth, budget)
    elif name == "find":
        yield from _find_runs(rest, depth, budget)


def _find_runs(args: list[tuple[str, bool]], depth: int, budget: _Budget) -> Iterator[list[str] | None]:
    """What `find`'s `-exec`, `-execdir`, `-ok` and `-okdir` run, each up to `;` or `+`."""
    for index, (word, _) in enumerate(args):
        if word in _FIND_EXEC:
            end = next((at for at in range(index + 1, len(args)) if args[at][0] in (";", "+")), len(args))
            yield from _unwrapped(args[index + 1 : end], depth, budget)


def _shell_runs(args: list[tuple[str, bool]], depth: int, budget: _Budget) -> Iterator[list[str] | None]:
    """What a shell runs: the text after `-c` (read as a command), or, with no script operand,
    its stdin (unknowable)."""
    for index, (word, _) in enumerate(args):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            if index + 1 < len(args):
                yield from _invocations(args[index + 1][0], depth + 1, budget)
            return
        if not word.startswith(("-", "+")):
            return  # `sh script.sh`: a script file, as any program is
    yield None  # `... | sh`: the commands come from stdin


def _simple_command(command: str) -> list[tuple[str, str]] | None:
    """(word, its source text) for each word of one plain simple command, else None."""
    if len(command) > MAX_PARSED_CHARS or any(mark in command for mark in _NEVER_SIMPLE):
        return None
    nodes = _parse(command)
    if nodes is None or len(nodes) != 1 or nodes[0].kind != "command":
        return None
    words: list[tuple[str, str]] = []
    for part in nodes[0].parts:
        if part.kind != "word" or any(sub.kind != "tilde" for sub in getattr(part, "parts", ())):
            return None  # an assignment, a redirection, an expansion
        words.append((part.word, command[part.pos[0] : part.pos[1]]))
    return words or None


def prepare() -> None:
    """Build the shell parser now: bashlex builds its grammar's tables anew at each import, which
    would otherwise fall on the first tool call a rule or a mode checks."""
    _parse.__wrapped__("true")


@functools.lru_cache(maxsize=PARSE_CACHE)
def _parse(command: str) -> tuple[Any, ...] | None:
    """bashlex's parse of `command` (its nodes are only read, so one parse serves every reader);
    None when bashlex cannot parse it."""
    import bashlex  # here, not at the top: its parser tables cost every bridge's start-up

    try:
        return tuple(bashlex.parse(command))
    except Exception:  # bashlex raises ParsingError, NotImplementedError, RecursionError...
        return None


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """Whether `needle` occurs as a contiguous run of `haystack`."""
    size = len(needle)
    return any(haystack[start : start + size] == needle for start in range(len(haystack) - size + 1))
