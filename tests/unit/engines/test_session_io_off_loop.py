"""The session files' blocking I/O reached from async code runs in a worker thread, never on the
event loop: the newest session's glob (continueSession), the check whether a session was
written (a conversation started anew under its id) and the cut of a session file before a
retry. And the cut touches regular files only."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.agents.pi.live import PiLiveMode
from bridge.agents.pi.sessions import trim_session_file
from bridge.agents.values import RunOptions
from bridge.contract import ErrorInfo
from bridge.engines.live import starts
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.live_agent import Lease, StartFailure

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Launcher:
    display_name = "pi"

    def __init__(self) -> None:
        self.mode = PiLiveMode()

    def spawn_failure(self, command: tuple[str, ...], reason: str) -> ErrorInfo:
        return ErrorInfo(kind="spawn", message=reason, retryable=False)

    def live_mode(self) -> PiLiveMode:
        return self.mode


def on_loop() -> bool:
    return threading.current_thread() is threading.main_thread()


async def test_the_newest_session_of_a_folder_is_found_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[bool] = []

    def latest(cwd: str, env: Mapping[str, str]) -> str:
        calls.append(on_loop())
        return "newest"

    launcher = _Launcher()
    monkeypatch.setattr(launcher.mode, "latest_session_id", latest)
    registry = Conversations(launcher)
    options = RunOptions(prompt="hi", cwd="/", continue_session=True)
    assert await registry.resolve_session(options, {}) == "newest"
    assert calls == [False]
    named = RunOptions(prompt="hi", cwd="/", session_id="given")
    assert await registry.resolve_session(named, {}) == "given"
    assert calls == [False], "a named session needs no glob"


async def test_a_retry_cuts_the_session_file_back_and_checks_it_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, bool]] = []

    def trim(path: str, size: int | None) -> None:
        calls.append(("trim", on_loop()))

    def exists(*args: Any) -> bool:
        calls.append(("exists", on_loop()))
        return False

    async def no_spawn(*args: Any) -> Any:
        raise starts.SpawnError("not in this test")

    launcher = _Launcher()
    monkeypatch.setattr(launcher.mode, "cut_session_back", trim)
    monkeypatch.setattr(launcher.mode, "session_stored", exists)
    monkeypatch.setattr(starts, "spawn", no_spawn)
    registry = Conversations(launcher)
    registry.starter.opened_add("s1")  # a conversation this bridge started: started anew if pi never wrote it
    lease = Lease(session_id="s1", trim=(str(tmp_path / "s1.jsonl"), 10))
    async with anyio.create_task_group() as tasks:
        await tasks.start(registry.serve)
        with pytest.raises(StartFailure):
            await registry.checkout(
                ("pi",), RunOptions(prompt="hi", cwd=str(tmp_path)), {}, lease, retrying=True
            )
        await registry.close()
        tasks.cancel_scope.cancel()
    assert calls == [("trim", False), ("exists", False)]


def test_the_cut_keeps_what_came_before_the_failed_prompt(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    session.write_bytes(b'{"type":"session"}\n{"a":1}\n{"b":2}\n')
    trim_session_file(str(session), len(b'{"type":"session"}\n{"a":1}\n'))
    assert session.read_bytes() == b'{"type":"session"}\n{"a":1}\n'
    trim_session_file(str(session), None)
    assert session.read_bytes() == b'{"type":"session"}\n', "a file pi had not written keeps its header"
    trim_session_file(str(tmp_path / "missing.jsonl"), 0)


def test_the_cut_leaves_a_fifo_alone(tmp_path: Path) -> None:
    """Its open would wait for a writer forever (in a worker thread now, but the run with it)."""
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)

    def trim_both() -> None:
        trim_session_file(str(fifo), 0)
        trim_session_file(str(fifo), None)

    worker = threading.Thread(target=trim_both, daemon=True)
    worker.start()
    worker.join(5.0)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let it go: it waited for a writer
        worker.join(5.0)
        pytest.fail("the cut opened the FIFO and waited for a writer")
