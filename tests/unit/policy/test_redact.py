"""The last line of redaction (bridge/policy/redact.py): what counts as a secret, frames masked
whole and framed again, and a secret cut across two `assistant` deltas."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from bridge.policy.redact import (
    MASK,
    SCRUB_NAMES_ENV,
    SECRET_NAMES_ENV,
    SecretBook,
    StreamGuard,
    env_secrets,
    file_secrets,
    header_secrets,
    looks_like_key,
    scrubbed_names,
    secret_env_names,
    secret_named,
)

KEY = "sk-test-Abc123def456GHI789"
QUOTED = 'pa"ss\\word-\u00e9-1234'


def _frame(message: object) -> bytes:
    body = orjson.dumps(message)
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _frames(data: bytes) -> list[object]:
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(head.split(b":")[1])
        found.append(json.loads(rest[:length]))
        data = rest[length:]
    return found


def test_what_counts_as_a_secret() -> None:
    assert env_secrets({"OPENAI_API_KEY": KEY, "GIT_AUTHOR_NAME": "Somebody Long"}) == {KEY}
    assert env_secrets({"X": "true", "DEBUG_TOKEN": "1", "MY_TOKEN": "short"}) == set()
    client = {
        "PLAIN": "Zx9" * 8,  # no telling name, looks like a key
        "HEX": "0123456789abcdef0123456789abcdef",
        "MODEL": "claude-sonnet-4-5-20250929",
        "DIR": "/home/someone/.pi/agent",
        "URL": "https://api.example.com/v1",
        "PROXY": "http://user:hunter2hunter2@proxy:3128",
        "WORDS": "a value with spaces AND 123",
    }
    assert env_secrets(client, client=True) == {
        "Zx9" * 8,
        "0123456789abcdef0123456789abcdef",
        "hunter2hunter2",
    }
    assert env_secrets(client) == {"hunter2hunter2"}, "outside the client's env only names decide"
    assert secret_env_names(client) == ["HEX", "PLAIN", "PROXY"]
    assert not looks_like_key("1.6.0") and not looks_like_key("production")
    assert header_secrets(["Bearer tok-12345678", "x"]) == {"Bearer tok-12345678", "tok-12345678"}


def test_the_bash_tool_keeps_only_the_basics_of_the_clients_env() -> None:
    env = {"PATH": "/bin", "LANG": "C.UTF-8", "PI_CODING_AGENT_DIR": "/x", "HTTPS_PROXY": "http://p:3128"}
    env["HTTP_PROXY"] = "http://u:secretpass@p:3128"
    assert scrubbed_names(env) == ["HTTP_PROXY", "PI_CODING_AGENT_DIR"]


def test_auth_files_give_their_secret_leaves() -> None:
    pi = {
        "anthropic": {"type": "api_key", "key": KEY},
        "codex": {"type": "oauth", "access": "acc-0123456789"},
    }
    assert file_secrets(json.dumps(pi)) == {KEY, "acc-0123456789"}
    claude = {"claudeAiOauth": {"accessToken": "at-0123456789", "scopes": ["user:inference"]}}
    assert file_secrets(json.dumps(claude)) == {"at-0123456789"}


def test_a_frame_without_a_secret_is_the_same_object() -> None:
    book = SecretBook({"A_KEY": KEY})
    data = _frame({"jsonrpc": "2.0", "method": "pi/message", "params": {"text": "hello"}})
    assert book.lsp_frames(data) is data
    line = orjson.dumps({"x": 1}) + b"\n"
    assert book.acp_lines(line) is line


def test_frames_are_masked_and_framed_again() -> None:
    book = SecretBook({"A_KEY": KEY, "B_PASSWORD": QUOTED})
    first = {"jsonrpc": "2.0", "method": "m", "params": {"text": f"k={KEY};q={QUOTED}", KEY: [QUOTED]}}
    second = {"jsonrpc": "2.0", "id": 3, "result": {"ok": True}}
    # as pygls writes it: json.dumps (ASCII escapes), its own header
    body = json.dumps(first).encode()
    pygls = b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc\r\n\r\n%s" % (len(body), body)
    data = book.lsp_frames(pygls + _frame(second))
    assert KEY.encode() not in data and b"ss\\\\word" not in data and b"\\u00e9-1234" not in data
    assert _frames(data) == [
        {"jsonrpc": "2.0", "method": "m", "params": {"text": f"k={MASK};q={MASK}", MASK: [MASK]}},
        second,
    ]
    lines = book.acp_lines(orjson.dumps(first) + b"\n" + orjson.dumps(second) + b"\n")
    assert [json.loads(line) for line in lines.splitlines()] == _frames(data)


def test_bytes_that_are_not_json_keep_their_length() -> None:
    book = SecretBook({"A_KEY": KEY})
    data = b"Content-Length: 40\r\n\r\n" + f"not json {KEY} at all".encode().ljust(40)
    masked = book.lsp_frames(data)
    assert len(masked) == len(data) and KEY.encode() not in masked


def test_an_auth_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"p": {"key": "first-0123456789"}}))
    book = SecretBook({})
    book.watch_files([str(auth)])
    assert book.text("first-0123456789") == MASK
    auth.write_text(json.dumps({"p": {"key": "second-0123456789abc"}}))
    book.check_files(force=True)
    assert book.text("second-0123456789abc first-0123456789") == f"{MASK} first-0123456789"


def test_a_secret_cut_across_two_deltas_is_masked_whole() -> None:
    book = SecretBook({"A_KEY": KEY})
    guard = StreamGuard(book)
    sent = [
        guard.feed("the key is sk-te"),
        guard.feed("st-Abc123"),
        guard.feed("def456GHI789, done s"),
        guard.flush(),
    ]
    assert sent == ["the key is ", "", f"{MASK}, done ", "s"]
    assert "".join(sent) == book.text(f"the key is {KEY}, done s")
    idle = StreamGuard(SecretBook({}))
    assert idle.idle and idle.feed("sk-te") == "sk-te"


def test_the_variables_naming_the_secrets_do_not_look_secret_themselves() -> None:
    """Else their values (the names) would be masked everywhere, `OPENAI_API_KEY` in any text."""
    assert not secret_named(SECRET_NAMES_ENV) and not secret_named(SCRUB_NAMES_ENV)


def test_every_cut_of_a_stream_masks_every_secret_whole() -> None:
    """Two and three deltas, cut at every place: the deltas hold no secret and no piece of one
    past its first characters, and their concatenation is the whole text masked."""
    other = "ghp_0123456789abcdefXYZ"
    book = SecretBook({"A_KEY": KEY, "B_TOKEN": other})
    full = f"see {KEY}sk{other} and sk-test-Abc end s"
    for first in range(len(full) + 1):
        for second in range(first, len(full) + 1, 7):
            guard = StreamGuard(book)
            pieces = [guard.feed(full[:first]), guard.feed(full[first:second]), guard.feed(full[second:])]
            pieces.append(guard.flush())
            assert "".join(pieces) == book.text(full) == f"see {MASK}sk{MASK} and sk-test-Abc end s"
            for piece in pieces:
                assert KEY[-12:] not in piece and other[-12:] not in piece, (first, second, pieces)


def test_an_auth_file_rewritten_in_place_with_its_old_mtime_is_read_again(tmp_path: Path) -> None:
    """A key rotated in place (the same size) with the file's mtime put back is still a change:
    the ctime cannot be put back."""
    import os

    auth = tmp_path / "auth.json"
    old, new = "sk-ant-first-4d6f8a0c2e4b6d8f", "sk-ant-later-9a8b7c6d5e4f3a2b"
    auth.write_text(json.dumps({"anthropic": {"type": "api_key", "key": old}}))
    book = SecretBook({})
    book.watch_files([str(auth)])
    assert book.text(old) == "[redacted]"
    before = auth.stat()
    with auth.open("r+") as handle:
        handle.write(auth.read_text().replace(old, new))
    os.utime(auth, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (auth.stat().st_size, auth.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    book.check_files(force=True)
    assert book.text(f"key {new}") == "key [redacted]"
