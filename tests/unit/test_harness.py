"""The test harness itself: no test approves itself, and no teardown hides a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from pytest_lsp import LanguageClient

from tests.support.env import (
    BRIDGE,
    EXEC_BRIDGE,
    FORKED,
    ROOT,
    TEST_TAG_ENV,
    bridge_env,
    fake_pi_command,
    pi_requirement,
)
from tests.support.leaks import run_processes
from tests.support.raw import RawBridge


def test_requires_pi_fails_instead_of_skipping_when_pi_is_required() -> None:
    skip_if = lambda mark: mark.mark.args[0]  # noqa: E731 (the skipif condition)
    assert skip_if(pi_requirement(found=False, required=True)) is False, "required: the test runs (and fails)"
    assert skip_if(pi_requirement(found=False, required=False)) is True
    assert skip_if(pi_requirement(found=True, required=False)) is False


def test_no_test_skips_itself_for_a_missing_pi_instead_of_using_requires_pi() -> None:
    """A hand-written `pytest.skip` ignores PI_BRIDGE_REQUIRE_*; the helpers of tests/support/env.py honour them."""
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name != Path(__file__).name and path != ROOT / "tests" / "support" / "env.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "pytest.skip(" in line or "pytest.importorskip(" in line
    ]
    assert offenders == [], "use tests.support.env.requires_pi"


IGNORES_END_OF_INPUT = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.stdin.close()\n"
    "time.sleep(60)\n"
)

LEAVES_A_RUN_PROCESS = (
    "import os, subprocess, sys\n"
    "env = dict(os.environ, PI_BRIDGE_RUN_TOKEN='leaked')\n"
    # Its output is not the bridge's stdout: holding that pipe, it kept the teardown's reader waiting.
    "subprocess.Popen(['sleep', '60'], env=env, start_new_session=True, stdout=subprocess.DEVNULL)\n"
    "sys.stdin.buffer.read()\n"
)


def test_teardown_fails_when_the_bridge_does_not_exit_at_end_of_input() -> None:
    bridge = RawBridge(command=[sys.executable, "-c", IGNORES_END_OF_INPUT])
    with pytest.raises(AssertionError, match="did not exit within 1 s"):
        bridge.close(timeout=1)
    assert not bridge.alive(), "killed by its pid"


def test_teardown_fails_when_a_process_of_a_run_outlives_the_bridge() -> None:
    bridge = RawBridge(command=[sys.executable, "-c", LEAVES_A_RUN_PROCESS])
    deadline = time.monotonic() + 10
    while not run_processes(marker=bridge.marker) and time.monotonic() < deadline:
        time.sleep(0.02)  # the fake bridge says nothing: poll /proc for its run process
    left = run_processes(marker=bridge.marker)
    assert left, "the fake bridge started its run process"
    with pytest.raises(AssertionError, match="still alive"):
        bridge.close(timeout=5, leak_timeout=0.5)  # the leak never ends: the check's wait is always spent
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in left), "the leak was killed"


LEAK_THEN_CLEAN = """
import subprocess
import time

from tests.support.env import bridge_env
from tests.support.leaks import tagged_processes


def test_leaks() -> None:
    leak = subprocess.Popen(["sleep", "60"], env=bridge_env({"PI_BRIDGE_RUN_TOKEN": "x"}), start_new_session=True)
    # Popen returns once the exec has begun, before the kernel has set up the new environment:
    # /proc shows it a moment later (polled: nothing signals it). The leak is there from then on.
    deadline = time.monotonic() + 10
    while b"PI_BRIDGE_RUN_TOKEN=x" not in open(f"/proc/{leak.pid}/environ", "rb").read():
        assert time.monotonic() < deadline, "the leak never showed its environment"
        time.sleep(0.01)


def test_clean() -> None:
    assert tagged_processes() == []
"""


def test_a_leak_fails_the_test_that_left_it_not_the_next_one(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (tmp_path / "test_inner.py").write_text(LEAK_THEN_CLEAN)
    inner = subprocess.run(  # noqa: PLW1510 (the outcome is read from the report)
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = inner.stdout
    assert re.search(r"^PASSED \S*test_inner.py::test_clean$", report, re.MULTILINE), report
    assert re.search(r"^ERROR \S*test_inner.py::test_leaks", report, re.MULTILINE), report
    assert "sleep 60" in report, "the failure names the leaked process"


async def test_a_pytest_lsp_bridge_carries_the_tag_of_the_test_that_started_it(
    fake_bridge: LanguageClient, leak_tag: str
) -> None:
    bridge = fake_bridge._server  # the bridge subprocess (pygls keeps it there)
    assert bridge is not None
    with open(f"/proc/{bridge.pid}/environ", "rb") as handle:
        assert f"{TEST_TAG_ENV}={leak_tag}".encode() in handle.read().split(b"\0")


@pytest.mark.parametrize("args", [["--version"], ["--no-such-flag"]])
def test_a_forked_bridge_answers_as_an_exec_one(args: list[str]) -> None:
    """The fork server's bridge prints and exits as `python -m bridge` does (argv, stdio, status)."""
    runs = [
        subprocess.run(
            [*command, *args], env=bridge_env(), cwd=ROOT, capture_output=True, timeout=60, check=False
        )
        for command in (BRIDGE, EXEC_BRIDGE)
    ]
    forked, execed = ((r.returncode, r.stdout, r.stderr) for r in runs)
    assert forked == execed


def test_a_forked_bridge_s_runs_carry_the_test_s_tag_and_marker() -> None:
    """Without them the leak checks would see nothing: the tag reaches a forked bridge's agents."""
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": fake_pi_command()})
        run = bridge.request("pi/run", {"runId": "tagged", "prompt": "x", "model": "sleep", "cwd": str(ROOT)})
        bridge.wait_message("tagged", "assistant")  # the fake pi is sleeping now
        [agent, *_] = run_processes(marker=bridge.marker)
        assert bridge.pid in {parent.pid for parent in agent.parents()}
        if FORKED:
            assert bridge.pid != bridge.proc.pid, "the bridge is the fork server's child, not its launcher"
        bridge.call("pi/cancel", {"runId": "tagged"})
        assert bridge.response(run)["error"]["data"]["status"] == "cancelled"
    finally:
        bridge.close()
