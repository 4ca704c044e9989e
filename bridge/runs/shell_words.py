"""Shell commands as words for permission rules: bashlex parses, and doubt never allows.

An allow rule matches only one simple command whose leading words are the rule's words: no list,
pipeline, subshell, redirection, substitution, expansion, assignment or anything bashlex cannot
parse. A deny rule is conservative the other way: it matches when its words appear in sequence
in any command the parse finds, or in a crude split of the raw text, so quoting and nesting do
not hide a denied command. Input past MAX_PARSED_CHARS is never parsed (allow: no; deny: the crude
split). Nothing here raises on any input.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final

import bashlex

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


def simple_command_words(command: str) -> list[str] | None:
    """The words of `command` if it is one plain simple command, else None."""
    words = _simple_command(command)
    return None if words is None else [word for word, _ in words]


def matches_allow(command: str, prefix: Sequence[str]) -> bool:
    """Whether an allow rule of leading words `prefix` covers `command` (one plain simple command)."""
    words = _simple_command(command)
    if words is None or not prefix or len(words) < len(prefix):
        return False
    # Each matched word must be written as-is: no quoting, escaping or expansion that could make
    # bash read it differently from bashlex.
    return all(
        word == wanted and raw == wanted and not _SPECIAL_IN_PREFIX.intersection(wanted)
        for (word, raw), wanted in zip(words, prefix, strict=False)
    )


def matches_deny(command: str, words: Sequence[str]) -> bool:
    """Whether a deny rule of `words` catches `command`: those words in sequence anywhere in it."""
    if not words:
        return False
    wanted = list(words)
    if _contains(_CRUDE_SEPARATORS.split(command), wanted):
        return True
    return any(_contains(found, wanted) for found in _parsed_commands(command))


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


def _parsed_commands(command: str) -> Iterator[list[str]]:
    """The words of every command bashlex finds in `command`, nested ones included."""
    nodes = _parse(command) if len(command) <= MAX_PARSED_CHARS else None
    if nodes is None:
        return
    stack: list[Any] = list(nodes)
    while stack:
        node = stack.pop()
        if node.kind == "command":
            yield [part.word for part in node.parts if part.kind == "word"]
        for field in ("parts", "list"):
            stack.extend(getattr(node, field, None) or ())
        for field in ("command", "output"):
            child = getattr(node, field, None)
            if child is not None and hasattr(child, "kind"):
                stack.append(child)


@functools.lru_cache(maxsize=PARSE_CACHE)
def _parse(command: str) -> tuple[Any, ...] | None:
    """bashlex's parse of `command` (its nodes are only read, so one parse serves every reader);
    None when bashlex cannot parse it."""
    try:
        return tuple(bashlex.parse(command))
    except Exception:  # bashlex raises ParsingError, NotImplementedError, RecursionError...
        return None


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """Whether `needle` occurs as a contiguous run of `haystack`."""
    size = len(needle)
    return any(haystack[start : start + size] == needle for start in range(len(haystack) - size + 1))
