"""The test worker's side of the fork server: start it once, on the first bridge, and map a
launcher's pid to its bridge's."""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

SOCKET_ENV: Final = "PI_BRIDGE_TEST_FORKSERVER"
#: The leak tag of the fork server's own environment, which its forked bridges show in /proc:
#: tests/support/leaks.py then sees them as bridges (tagged, without a run token).
TAG: Final = "forkserver"
READY_TIMEOUT: Final = 120.0


class _Server:
    process: subprocess.Popen[bytes] | None = None
    socket: str = ""
    pid_dir: Path | None = None


def socket_path() -> str:
    """The socket of this worker's fork server, started on first use."""
    if _Server.process is None or _Server.process.poll() is not None:
        _start()
    return _Server.socket


def _start() -> None:
    from tests.support.env import ROOT, TEST_TAG_ENV

    work = Path(tempfile.mkdtemp(prefix="pi-bridge-forkserver-"))
    pid_dir = work / "pids"
    pid_dir.mkdir()
    sock = str(work / "socket")
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    env[TEST_TAG_ENV] = TAG
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.forkserver", sock, str(pid_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(READY_TIMEOUT) or process.stdout.readline().strip() != b"ready":
            process.kill()
            raise RuntimeError(f"the fork server did not start within {READY_TIMEOUT} s")
    _Server.process, _Server.socket, _Server.pid_dir = process, sock, pid_dir
    atexit.register(_stop, process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End of its input: it stops serving (bridges still running end on their own input's end)."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def bridge_pid(pid: int, timeout: float = 30.0) -> int:
    """The bridge behind launcher `pid`, or `pid` itself (a bridge started by exec, or one that
    has ended). A launcher whose bridge is not forked yet is waited for: the file is polled, as
    nothing signals it."""
    if _Server.pid_dir is None:
        return pid
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int((_Server.pid_dir / str(pid)).read_text())
        except (OSError, ValueError):
            pass
        if not _is_waiting_launcher(pid) or time.monotonic() > deadline:
            return pid
        time.sleep(0.01)


def _is_waiting_launcher(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"forked_bridge.py" in handle.read()
    except OSError:
        return False
