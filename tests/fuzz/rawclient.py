"""A raw JSON-RPC client for a live bridge process: it can send broken bytes and stop reading.

pytest-lsp only speaks well-formed LSP; the fuzz and load suites also need to write malformed
frames, pause reading (outbound backpressure) and measure the bridge's process from /proc. One
reader thread parses frames from the bridge's stdout into a list; waits are on a condition
variable with a timeout, never on sleeps. The bridge is stopped by its own pid only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psutil

from bridge.stdio_client import read_frame
from bridge.transport import frame
from tests.harness import ROOT, bridge_env, tagged_processes

WAIT = 30.0
MARKER_ENV = "PI_BRIDGE_FUZZ_BRIDGE"
BRIDGE = [sys.executable, "-m", "bridge"]
Message = dict[str, Any]


def encode(payload: Any) -> bytes:
    """A framed JSON message."""
    return frame(json.dumps(payload, ensure_ascii=False).encode("utf-8"))


class RawBridge:
    """A bridge subprocess spoken to over raw stdio, with a frame-parsing reader thread."""

    def __init__(
        self,
        extra_env: dict[str, str] | None = None,
        *,
        args: list[str] | None = None,
        log_file: Path | None = None,
        stderr_file: Path | None = None,
    ) -> None:
        self.marker = uuid.uuid4().hex
        self.env = bridge_env({MARKER_ENV: self.marker, **(extra_env or {})})
        self.argv = [*BRIDGE, *(args or [])]
        if log_file is not None:
            self.argv += ["--log-file", str(log_file)]
        self._stderr_handle: IO[bytes] | None = open(stderr_file, "wb") if stderr_file else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_handle if self._stderr_handle else subprocess.DEVNULL,
            env=self.env,
            cwd=ROOT,
        )
        self.messages: list[Message] = []
        self.by_run: dict[str, list[Message]] = {}
        self.responses: dict[Any, list[Message]] = {}
        self.arrivals: list[tuple[float, str, str]] = []  # (monotonic time, runId, type) of pi/message
        self.eof = False
        self.reader_error: BaseException | None = None
        self._cond = threading.Condition()
        self._reading = threading.Event()
        self._reading.set()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read_loop, name="raw-bridge-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ process

    @property
    def pid(self) -> int:
        """The bridge's pid."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the bridge process is still running."""
        return self.proc.poll() is None

    # ------------------------------------------------------------------ writing

    def send_bytes(self, data: bytes) -> None:
        """Write raw bytes to the bridge's stdin."""
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            stdin.write(data)
            stdin.flush()

    def send(self, payload: Any) -> None:
        """Write one framed JSON message."""
        self.send_bytes(encode(payload))

    def new_id(self) -> int:
        """A fresh request id."""
        with self._cond:
            self._next_id += 1
            return self._next_id

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request (params null when not given); return its id."""
        if msg_id is None:
            msg_id = self.new_id()
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (params null when not given)."""
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def close_stdin(self) -> None:
        """End the bridge's input."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.close()
        except BrokenPipeError:
            pass

    # ------------------------------------------------------------------ reading

    def pause_reading(self) -> None:
        """Stop reading the bridge's stdout (a client that stopped reading)."""
        self._reading.clear()

    def resume_reading(self) -> None:
        """Read again."""
        self._reading.set()

    def _read_loop(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                self._reading.wait()
                message = read_frame(stdout)
                if message is None:
                    break
                with self._cond:
                    self.messages.append(message)
                    if message.get("method") == "pi/message":
                        params = message["params"]
                        self.by_run.setdefault(params["runId"], []).append(params)
                        self.arrivals.append((time.monotonic(), params["runId"], params["type"]))
                    elif "method" not in message:
                        self.responses.setdefault(message.get("id"), []).append(message)
                    self._cond.notify_all()
        except BaseException as exc:  # surfaced by the waits: a broken frame from the bridge
            self.reader_error = exc
        finally:
            with self._cond:
                self.eof = True
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
        """Wait until predicate() (checked under the lock) holds; fail after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self.reader_error is not None:
                    raise AssertionError(f"bad output from the bridge: {self.reader_error!r}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{what} not met within {timeout} s")
                if self.eof and not predicate():
                    raise AssertionError(f"the bridge closed its output before: {what}")
                self._cond.wait(remaining)

    def response(self, msg_id: Any, timeout: float = WAIT) -> Message:
        """Wait for the (first) response to `msg_id`."""
        self.wait_for(lambda: msg_id in self.responses, timeout, f"response to id {msg_id!r}")
        return self.responses[msg_id][0]

    def has_response(self, msg_id: Any) -> bool:
        """Whether a response to `msg_id` has arrived."""
        with self._cond:
            return msg_id in self.responses

    def call(self, method: str, params: Any = None, timeout: float = WAIT) -> Message:
        """Request and wait for the response."""
        return self.response(self.request(method, params), timeout)

    def run_messages(self, run_id: str) -> list[Message]:
        """A copy of run `run_id`'s pi/message params so far."""
        with self._cond:
            return list(self.by_run.get(run_id, []))

    def wait_message(self, run_id: str, kind: str, timeout: float = WAIT) -> Message:
        """Wait for the first message of `kind` in run `run_id`."""
        self.wait_for(
            lambda: any(m["type"] == kind for m in self.by_run.get(run_id, [])),
            timeout,
            f"a {kind} message of run {run_id}",
        )
        return next(m for m in self.run_messages(run_id) if m["type"] == kind)

    def errors_with_null_id(self) -> list[Message]:
        """Error responses the bridge could not tie to a request (id null)."""
        with self._cond:
            return list(self.responses.get(None, []))

    # ------------------------------------------------------------------ lifecycle

    def initialize(self, options: dict[str, Any] | None = None) -> Message:
        """initialize + initialized."""
        answer = self.call(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": ROOT.as_uri(),
                "capabilities": {},
                "initializationOptions": options,
            },
        )
        assert "result" in answer, answer
        self.notify("initialized", {})
        return answer

    def shutdown(self, timeout: float = WAIT) -> int:
        """shutdown + exit; return the exit code. Kills the bridge (by pid) if it does not exit."""
        try:
            if self.alive() and not self.eof:
                self.response(self.request("shutdown"), timeout)
                self.notify("exit")
            self.close_stdin()
        except (BrokenPipeError, OSError, AssertionError):
            pass
        self.resume_reading()
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = WAIT) -> int:
        """Wait for the bridge to exit; kill it (by its pid) on timeout and fail."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the bridge (pid {self.pid}) did not exit within {timeout} s") from None
        finally:
            self._reader.join(timeout)
            if self._stderr_handle is not None:
                self._stderr_handle.close()
        return code

    def stop(self, timeout: float = WAIT) -> None:
        """End the bridge's input (it then stops every run, tree and all) and wait for it to exit."""
        if self.proc.returncode is not None:
            return
        self.resume_reading()
        self.close_stdin()
        try:
            self.wait_exit(timeout)
        except AssertionError:
            pass

    def kill(self) -> None:
        """Kill the bridge by its pid (a last resort in teardown)."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(WAIT)


def proc_stats(pid: int) -> dict[str, int]:
    """RSS (kB), peak RSS (kB), threads and open fds of a process, read from /proc."""
    stats: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                stats["rss_kb"] = int(value.split()[0])
            elif key == "VmHWM":
                stats["peak_rss_kb"] = int(value.split()[0])
            elif key == "Threads":
                stats["threads"] = int(value)
    stats["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return stats


def run_processes(marker: str | None) -> list[psutil.Process]:
    """Live processes of runs of the bridge with this marker (of every test bridge when None)."""
    if marker is None:
        return tagged_processes()
    needle = f"{MARKER_ENV}={marker}".encode()
    return [p for p in tagged_processes() if _environ_has(p.pid, needle)]


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in handle.read()
    except OSError:
        return False


def no_run_processes(bridge: RawBridge | None = None, timeout: float = 10.0) -> None:
    """Fail if a process of a run (of `bridge`, or of any test bridge) is alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = run_processes(bridge.marker if bridge is not None else None)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of a run are still alive: {[p.pid for p in left]}")
        time.sleep(0.05)  # polling /proc: there is no event to wait on for another process's exit


def peak_live_runs(bridges: list[RawBridge]) -> int:
    """Most runs streaming at the same moment: first message seen, terminal not yet seen."""
    edges: list[tuple[float, int]] = []
    for bridge in bridges:
        first: dict[str, float] = {}
        for t, run_id, kind in bridge.arrivals:
            first.setdefault(run_id, t)
            if kind.startswith("terminal."):
                edges += [(first[run_id], 1), (t, -1)]
    live = peak = 0
    for _, step in sorted(edges):
        live += step
        peak = max(peak, live)
    return peak
