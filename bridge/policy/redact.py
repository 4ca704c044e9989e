"""Keep secrets handed to the agent (API keys, tokens, auth files) out of everything the bridge sends."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

import orjson

_SECRET_NAME: Final = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE", re.IGNORECASE)
#: Keys of an auth file's JSON whose string leaves (under them, at any depth) are secrets.
_SECRET_LEAF: Final = re.compile(r"key|token|secret|passw|credential|access|refresh|cookie", re.IGNORECASE)
MIN_SECRET_LENGTH: Final = 8
_MIN_SECRET_LENGTH: Final = MIN_SECRET_LENGTH  # the older name
MASK: Final = "[redacted]"
_MASK_BYTES: Final = MASK.encode()
#: How often (seconds) the last line looks again at the auth files, which an agent rewrites when
#: it refreshes a token.
FILE_CHECK_SECONDS: Final = 1.0
_KEY_RUN: Final = re.compile(r"[A-Za-z0-9]{20,}")
#: The environment variables that tell the pi extension (extension/secrets.ts) which of the
#: client's variables hold secrets (their values are redacted in every tool result) and which the
#: bash tool does not get: names only, comma-separated; the values are in pi's environment already.
#: (Their own names must not look secret: their values would be masked as secrets.)
SECRET_NAMES_ENV: Final = "PI_BRIDGE_MASKED_VARS"
SCRUB_NAMES_ENV: Final = "PI_BRIDGE_DROPPED_VARS"
#: The client's variables a command still gets (unless their value is a secret): what any
#: command needs to run as the user expects, and the proxies it needs to reach the network.
_KEPT: Final = re.compile(
    r"PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_\w+|TERM|TZ|TMPDIR|(HTTPS?|NO|ALL)_PROXY", re.IGNORECASE
)


def secret_named(name: str) -> bool:
    """Whether a variable's name says it holds a credential."""
    return _SECRET_NAME.search(name) is not None


def looks_like_key(value: str) -> bool:
    """Whether a value of no telling name still looks like a key: long, no whitespace, not a path
    or a URL, and either upper and lower letters and digits mixed, or one long alphanumeric run
    with digits (hex and base64 tokens). A model id (`claude-sonnet-4-5-20250929`), a path, a
    version or a word does not."""
    if len(value) < 16 or any(c.isspace() for c in value) or value[0] in "/~.":
        return False
    if "://" in value:
        return False
    upper = any(c.isupper() for c in value)
    lower = any(c.islower() for c in value)
    digit = any(c.isdigit() for c in value)
    if upper and lower and digit:
        return True
    run = _KEY_RUN.search(value)
    return run is not None and any(c.isdigit() for c in run.group()) and (upper or lower)


def _url_password(value: str) -> str | None:
    """The password of a URL's userinfo (`https://user:pw@host`), if there is one."""
    if "://" not in value or "@" not in value:
        return None
    try:
        return urlsplit(value).password
    except ValueError:
        return None


def env_secrets(env: Mapping[str, str], *, client: bool = False) -> set[str]:
    """The secret values of an environment: secret-named ones, URL passwords, and (for the
    client's `initializationOptions.env`, `client`) any value that looks like a key."""
    found: set[str] = set()
    for name, value in env.items():
        if not isinstance(value, str):
            continue
        if secret_named(name) or (client and looks_like_key(value)):
            found.add(value)
        password = _url_password(value)
        if password:
            found.add(password)
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


def secret_env_names(env: Mapping[str, str]) -> list[str]:
    """The names of the client's variables whose values are secrets by `env_secrets` (the pi
    extension redacts their values in every tool result)."""
    return sorted(name for name, value in env.items() if env_secrets({name: value}, client=True))


def scrubbed_names(env: Mapping[str, str]) -> list[str]:
    """The client's variables pi's bash tool does not get: all but the basics a command needs
    (`_KEPT`), and those too when their value is a secret."""
    secret = set(secret_env_names(env))
    return sorted(name for name in env if name in secret or not _KEPT.fullmatch(name))


def header_secrets(values: Iterable[str]) -> set[str]:
    """MCP env and header values, and a header's credential after its scheme (`Bearer <token>`)."""
    found: set[str] = set()
    for value in values:
        found.add(value)
        scheme, _, rest = value.partition(" ")
        if rest and scheme.isalpha():
            found.add(rest.strip())
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


def file_secrets(text: str) -> set[str]:
    """The secret leaves of an auth file's JSON (any string under a secret-sounding key), or, if
    it is not JSON, each of its long words."""
    try:
        data = json.loads(text)
    except ValueError:
        return {word for word in re.split(r"[\s=:\"',]+", text) if len(word) >= MIN_SECRET_LENGTH}
    found: set[str] = set()

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, str):
            if secret and len(node) >= MIN_SECRET_LENGTH:
                found.add(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(value, secret or bool(_SECRET_LEAF.search(str(key))))
        elif isinstance(node, list):
            for value in node:
                walk(value, secret)

    walk(data, False)
    return found


def _needles(value: str) -> set[bytes]:
    """The bytes a value shows as in a frame: raw UTF-8, and JSON-escaped as orjson and as
    json.dumps (pygls, ASCII-only) write it."""
    return {
        value.encode("utf-8", "surrogatepass"),
        orjson.dumps(value)[1:-1],
        json.dumps(value)[1:-1].encode(),
    }


def _pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    # Longest first, so a secret that contains another is masked whole.
    ordered = sorted(set(values), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


class SecretBook:
    """Every secret value this bridge process knows, and the last line that masks them."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._env_values: set[str] = env_secrets(os.environ if environ is None else environ)
        self._files: dict[str, tuple[tuple[int, ...] | None, frozenset[str]]] = {}
        self._next_check = 0.0
        self.values: tuple[str, ...] = ()
        self.needles: tuple[bytes, ...] = ()
        self._compiled: re.Pattern[str] | None = None
        self._rebuild()

    # ------------------------------------------------------------------ what it knows

    def add_env(self, env: Mapping[str, str], *, client: bool = False) -> None:
        """An environment's secrets (`client`: the client's initializationOptions.env)."""
        self.add_values(env_secrets(env, client=client))

    def add_values(self, values: Iterable[str]) -> None:
        """Values that are secrets whatever they are called (at least MIN_SECRET_LENGTH long)."""
        new = {value for value in values if len(value) >= MIN_SECRET_LENGTH} - self._env_values
        if new:
            with self._lock:
                self._env_values |= new
                self._rebuild()

    def watch_files(self, paths: Iterable[str]) -> None:
        """Auth files whose secret leaves are secrets, read now and again whenever they change."""
        added = False
        with self._lock:
            for path in paths:
                if path not in self._files:
                    self._files[path] = (None, frozenset())
                    added = True
        if added:
            self.check_files(force=True)

    def check_files(self, *, force: bool = False) -> None:
        """Read again each watched file that changed (at most every FILE_CHECK_SECONDS)."""
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + FILE_CHECK_SECONDS
        changed = False
        for path, (seen, _values) in list(self._files.items()):
            try:
                info = os.stat(path)
                # the ctime too: a rewrite of the same size may put its old mtime back, not its ctime
                stamp: tuple[int, ...] | None = (
                    info.st_ino,
                    info.st_ctime_ns,
                    info.st_mtime_ns,
                    info.st_size,
                )
            except OSError:
                stamp = None
            if stamp == seen:
                continue
            values: frozenset[str] = frozenset()
            if stamp is not None:
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        values = frozenset(file_secrets(handle.read(1 << 20)))
                except OSError:
                    pass
            with self._lock:
                self._files[path] = (stamp, values)
            changed = True
        if changed:
            with self._lock:
                self._rebuild()

    def _rebuild(self) -> None:
        values = set(self._env_values)
        for _stamp, file_values in self._files.values():
            values |= file_values
        self.values = tuple(sorted(values, key=len, reverse=True))
        self.needles = tuple({needle for value in values for needle in _needles(value)})
        self._compiled = _pattern(values)
        by_head: dict[str, tuple[str, ...]] = {}
        for value in self.values:
            by_head[value[:2]] = (*by_head.get(value[:2], ()), value)
        self._by_head = by_head
        self._firsts = frozenset(value[0] for value in values)
        self._longest = len(self.values[0]) if values else 0

    # ------------------------------------------------------------------ masking

    def text(self, value: str) -> str:
        """The text with every known secret masked."""
        pattern = self._compiled
        return pattern.sub(MASK, value) if pattern is not None else value

    def holds(self, data: bytes) -> bool:
        """Whether these bytes hold any secret, in any of its forms (the fast path's test)."""
        if self._files:
            self.check_files()
        for needle in self.needles:  # noqa: SIM110 (a loop: no generator per frame on the hot path)
            if needle in data:
                return True
        return False

    def json_body(self, body: bytes) -> bytes:
        """One JSON message with every string (and key) masked; bytes that are not JSON get each
        secret overwritten by as many `*` (so any length prefix stays right)."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            for needle in self.needles:
                body = body.replace(needle, b"*" * len(needle))
            return body
        return orjson.dumps(self._masked(message))

    def _masked(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {self.text(key): self._masked(value) for key, value in node.items()}
        if isinstance(node, list):
            return [self._masked(value) for value in node]
        return node

    def lsp_frames(self, data: bytes) -> bytes:
        """LSP-framed messages (one or more, whole) with every secret masked, each framed again."""
        if not self.holds(data):
            return data
        out: list[bytes] = []
        pos = 0
        while pos < len(data):
            end = data.find(b"\r\n\r\n", pos)
            length = _content_length(data[pos:end]) if end != -1 else None
            if length is None or end + 4 + length > len(data):
                out.append(self.json_body(data[pos:]))  # not frames we can read: masked in place
                break
            body = self.json_body(data[end + 4 : end + 4 + length])
            out.append(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            pos = end + 4 + length
        return b"".join(out)

    def acp_lines(self, data: bytes) -> bytes:
        """Newline-delimited JSON messages with every secret masked."""
        if not self.holds(data):
            return data
        return b"\n".join(self.json_body(line) if line.strip() else line for line in data.split(b"\n"))

    def partial_tail(self, text: str) -> int:
        """Where the longest tail of `text` that could begin a known secret starts (len: none).
        Only the places in the last (longest secret - 1) characters that hold a secret's first
        two characters are tried, then a last character that begins one."""
        end = len(text)
        start = max(0, end - self._longest + 1)
        cut = end
        for head, group in self._by_head.items():
            i = text.find(head, start, cut + 1)
            while i != -1:
                tail = text[i:]
                if any(len(value) > len(tail) and value.startswith(tail) for value in group):
                    cut = i
                    break
                i = text.find(head, i + 1, cut + 1)
        if cut == end and end and text[-1] in self._firsts:
            return end - 1
        return cut


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


#: This process's book: the bridge's environment, added at its start (`learn_the_environment`),
#: then the rest as the client gives it. Empty at import: what imports this module first may not
#: have the bridge's environment (a test's fork server).
BOOK: Final = SecretBook(environ={})


def learn_the_environment() -> None:
    """The secrets of this process's environment, into `BOOK`: called at the bridge's start."""
    BOOK.add_env(os.environ)


class StreamGuard:
    """Masks a stream of text deltas whose concatenation may hold a secret cut in two: a delta's
    tail that could begin a secret is held back until the next delta (or `flush`) decides."""

    def __init__(self, book: SecretBook = BOOK) -> None:
        self._book = book
        self._held = ""

    @property
    def idle(self) -> bool:
        """Nothing to mask and nothing held: a delta goes out as it is."""
        return not self._book.values and not self._held

    def feed(self, delta: str) -> str:
        """The part of the stream so far that can be sent now, masked."""
        book = self._book
        if not book.values and not self._held:
            return delta
        text = book.text(self._held + delta)
        cut = book.partial_tail(text)
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        """What was held back: the stream ended (or something else is sent first)."""
        held, self._held = self._held, ""
        return held


class Redactor:
    """Replaces the values of secret-looking environment variables with a mask.

    The pattern is built on first use: every run gets a redactor, few ever report an error.
    Whatever `BOOK` knows is masked too.
    """

    def __init__(self, *envs: Mapping[str, str]) -> None:
        self._envs = envs or (os.environ,)
        self._built = False
        self._compiled: re.Pattern[str] | None = None

    @property
    def _pattern(self) -> re.Pattern[str] | None:
        if not self._built:
            values: set[str] = set()
            for env in self._envs:
                for name, value in env.items():
                    if secret_named(name) and len(value) >= MIN_SECRET_LENGTH:
                        values.add(value)
            self._compiled = _pattern(values)
            self._built = True
        return self._compiled

    def text(self, value: str) -> str:
        """The text with every secret masked."""
        masked = self._pattern.sub(MASK, value) if self._pattern is not None else value
        return BOOK.text(masked)

    def error(self, error: dict[str, Any]) -> dict[str, Any]:
        """A wire ErrorInfo dict with its message, stderr and sample lines masked."""
        masked = dict(error)
        for key in ("message", "stderr"):
            if isinstance(masked.get(key), str):
                masked[key] = self.text(masked[key])
        lines = masked.get("invalidOutputLines")
        if isinstance(lines, list):
            masked["invalidOutputLines"] = [self.text(line) for line in lines]
        return masked


class RedactingFormatter(logging.Formatter):
    """A log formatter that masks the secrets of the bridge's environment, of every environment
    handed on with `mask_in_logs`, and of `BOOK`, in each whole formatted line."""

    _envs: ClassVar[list[Mapping[str, str]]] = [os.environ]
    _redactor: ClassVar[Redactor | None] = None

    def format(self, record: logging.LogRecord) -> str:
        redactor = RedactingFormatter._redactor
        if redactor is None:
            redactor = RedactingFormatter._redactor = Redactor(*RedactingFormatter._envs)
        return redactor.text(super().format(record))


def secrets_env(values: list[str]) -> dict[str, str]:
    """Values that are secrets whatever they are called (an MCP server's env values and headers),
    as an environment whose every name says secret, for `Redactor` and `mask_in_logs`."""
    return {f"PI_BRIDGE_SECRET_{i}": value for i, value in enumerate(values)}


def mask_in_logs(env: Mapping[str, str]) -> None:
    """Mask this environment's secret-looking values in every later log line too (the agents'
    environment from initializationOptions.env, which os.environ does not hold)."""
    if env and env not in RedactingFormatter._envs:
        RedactingFormatter._envs.append(dict(env))
        RedactingFormatter._redactor = None
