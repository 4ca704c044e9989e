"""The checkpoints' recorder (bridge/checkpoints/recorder.py) on real git: what a prompt's path pays
for the snapshot before it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from bridge.agents.values import RunOptions
from bridge.checkpoints.recorder import Checkpoints
from bridge.checkpoints.shadow_git import find_git
from bridge.engines.cancel import CancelToken

pytestmark = pytest.mark.skipif(find_git() is None, reason="git is not installed")


@dataclass
class _Params:
    prompt: str = "p"
    mode: Any = None


@dataclass
class _Run:
    """What the recorder reads and marks of a run."""

    run_id: str
    options: RunOptions
    session_id: str | None = "s-1"
    cancel: CancelToken = field(default_factory=CancelToken)
    denied: set[str] = field(default_factory=set)
    judged_paths: dict[str, str] = field(default_factory=dict)
    file_access: Any = None
    before_tools: anyio.Event | None = None
    checkpoint_start: Callable[[], None] | None = None
    checkpoint_note: str | None = None
    params: _Params = field(default_factory=_Params)


def _recorder(tmp_path: Path, tasks: anyio.abc.TaskGroup) -> Checkpoints:
    def spawn(work: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        tasks.start_soon(work)
        return True

    return Checkpoints(tmp_path / "state", spawn)


async def _first_turn(recorder: Checkpoints, options: RunOptions) -> None:
    """A conversation's first turn, recorded: its snapshot scans, after the run's first output."""
    first = _Run("r1", options)
    recorder.begin(first)  # type: ignore[arg-type]
    assert first.before_tools is not None and not first.before_tools.is_set()
    assert first.checkpoint_start is not None
    start, first.checkpoint_start = first.checkpoint_start, None  # what Run.take_checkpoint does
    start()
    with anyio.fail_after(30):
        await first.before_tools.wait()
    recorder.end(first)  # type: ignore[arg-type]
    with anyio.fail_after(30):
        await recorder.of_session("s-1")


async def test_a_prompt_after_no_change_holds_no_tool_and_writes_nothing_until_its_record(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    async with anyio.create_task_group() as tasks:
        recorder = _recorder(tmp_path, tasks)
        ready: list[str] = []
        recorder.on_ready = lambda run: ready.append(run.run_id)
        options = RunOptions(prompt="p", cwd=str(ws))
        await _first_turn(recorder, options)

        second = _Run("r2", options)
        recorder.begin(second)  # type: ignore[arg-type]
        # nothing changed since: the snapshot is the last one again, taken here and now
        assert second.before_tools is not None and second.before_tools.is_set()
        assert second.checkpoint_start is None and ready[-1] == "r2"
        git_dir = next((tmp_path / "state").rglob("refs/pi-bridge"))
        assert not (git_dir / "r2-before").exists(), "a ref written on the prompt's path"
        recorder.end(second)  # type: ignore[arg-type]
        with anyio.fail_after(30):
            await recorder.of_session("s-1")
        assert (git_dir / "r2-before").exists(), "the record's commit is kept by its ref"
        listed = await recorder.of_session("s-1")
        assert [record.run_id for record in listed] == ["r1", "r2"]
        tasks.cancel_scope.cancel()


async def test_a_follow_up_sent_as_the_answer_comes_holds_no_tool_and_the_records_stay_exact(
    tmp_path: Path,
) -> None:
    """An editor sends the next prompt the moment the answer before it arrives: the turn that
    changed nothing has its snapshot after it taken at its end, so the follow-up finds none
    queued and holds no tool; a turn that changed a file still records it, in order."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    async with anyio.create_task_group() as tasks:
        recorder = _recorder(tmp_path, tasks)
        options = RunOptions(prompt="p", cwd=str(ws))
        await _first_turn(recorder, options)

        runs = [_Run(f"q{index}", options) for index in range(4)]
        for index, run in enumerate(runs):
            recorder.begin(run)  # type: ignore[arg-type]
            assert run.before_tools is not None and run.before_tools.is_set(), f"{run.run_id} held its tools"
            if index == 2:
                (ws / "a.txt").write_text("changed by q2\n")
            recorder.end(run)  # type: ignore[arg-type]
            if index == 2:
                with anyio.fail_after(30):  # a change: its snapshot is taken in the background
                    await recorder.of_session("s-1")
        with anyio.fail_after(30):
            listed = await recorder.of_session("s-1")
        assert [record.run_id for record in listed] == ["r1", "q0", "q1", "q2", "q3"]
        assert [record.files for record in listed] == [[], [], [], ["a.txt"], []]
        assert listed[3].after == listed[4].before != listed[2].after
        git_dir = next((tmp_path / "state").rglob("refs/pi-bridge"))
        for record in listed[1:]:
            for side in ("before", "after"):
                assert (git_dir / f"{record.run_id}-{side}").exists(), f"{record.run_id}-{side} unnamed"
        tasks.cancel_scope.cancel()
