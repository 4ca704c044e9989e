"""Issue 34, items 15 and 16: a files rewind after a turn the model chose, on real pi 1.6.0.

A rewind never deletes a path its checkpoint did not record as made by the turn, and puts back
the exact bytes, whatever the workspace's `.gitignore` and `.gitattributes` say.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.scripted_model import ScriptedModelServer
from tests.security.harness import Bench, FakeHome, pi_options, start_bench
from tests.support.env import WAIT, requires_pi

pytestmark = [requires_pi, pytest.mark.realpi]


@pytest.fixture(scope="module")
def bench(home: FakeHome, model: ScriptedModelServer) -> Iterator[Bench]:
    yield from start_bench(home, model, pi_options(home, defaultMode="full"))


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x"}
    env |= {"GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _turn_then_rewind(bench: Bench, ws: Path, command: str) -> dict[str, Any]:
    """One turn running `command`, then a files rewind to before it; the rewind's answer."""
    answer, _, _ = bench.script(ws, [["bash", {"command": command}]])
    assert "result" in answer and answer["result"]["status"] == "completed", answer
    session = answer["result"]["sessionId"]
    deadline = time.monotonic() + WAIT
    listed: list[dict[str, Any]] = []
    while not listed:  # the turn's record is written after its answer: no event to wait on
        assert time.monotonic() < deadline, "the turn's checkpoint never showed"
        listed = bench.call("pi/checkpoints", {"sessionId": session})["checkpoints"]
    rewind = {"sessionId": session, "checkpointId": listed[0]["checkpointId"], "restore": "files"}
    return dict(bench.call("pi/rewind", rewind))


def test_15_a_rewind_keeps_an_ignored_file_when_the_turn_rewrote_gitignore(bench: Bench) -> None:
    ws = bench.home.workspace("ignored")
    (ws / ".gitignore").write_text(".env\n")
    env_bytes = b"API_TOKEN=the-user-s-only-copy\r\n\x00binary tail\n"
    (ws / ".env").write_bytes(env_bytes)
    _git(ws, "init", "-q")
    _git(ws, "add", ".gitignore")
    _git(ws, "commit", "-qm", "ignore .env")
    done = _turn_then_rewind(bench, ws, "printf 'build/\\n' > .gitignore")
    assert (ws / ".env").exists(), f"the rewind deleted the ignored .env: {done}"
    assert (ws / ".env").read_bytes() == env_bytes
    assert (ws / ".gitignore").read_text() == ".env\n"


def test_16_a_rewind_puts_back_the_exact_bytes_whatever_gitattributes_says(bench: Bench) -> None:
    ws = bench.home.workspace("attributes")
    (ws / ".gitattributes").write_text("* text eol=crlf ident\n")
    original = b"line one\nid: $Id$\nno newline at the end"
    (ws / "notes.txt").write_bytes(original)
    _git(ws, "init", "-q")
    done = _turn_then_rewind(bench, ws, "printf 'changed\\n' > notes.txt")
    assert "notes.txt" in done["restored"], done
    assert (ws / "notes.txt").read_bytes() == original
