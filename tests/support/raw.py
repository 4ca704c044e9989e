"""RawBridge: a bridge process spoken to over raw stdio (lifecycle, framing, fuzz and load tests).

It is the client-side stdio peer (bridge/tools/stdio_client.py) plus what a test keeps: every
message, pi/message params by run, responses by id, arrival times.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bridge.tools.stdio_client import StdioPeer
from tests.support.env import BRIDGE, BRIDGE_MARKER_ENV, ROOT, WAIT, bridge_env, bridge_pid
from tests.support.leaks import no_run_processes

Message = dict[str, Any]


class RawBridge(StdioPeer):
    """A bridge spoken to frame by frame: it can send broken bytes and stop reading (outbound
    backpressure).

    One reader thread parses frames into `messages`; waits are on a condition variable with a
    timeout. Teardown is `close()`: end of input, exit within the timeout (else the bridge is
    killed by its pid and the test fails), and no process of its runs left (else they are killed
    and the test fails).
    """

    def __init__(
        self,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        *,
        log_file: Path | None = None,
        stderr_file: Path | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.marker = uuid.uuid4().hex
        self.env = bridge_env({BRIDGE_MARKER_ENV: self.marker, **(env or {})})
        self.argv = [*(command or BRIDGE), *(args or [])]
        if log_file is not None:
            self.argv += ["--log-file", str(log_file)]
        self._stderr_handle: IO[bytes] | None = open(stderr_file, "wb") if stderr_file else None  # noqa: SIM115
        super().__init__(self.argv, env=self.env, cwd=ROOT, stderr=self._stderr_handle)
        self.client = self  # the older harness spelled requests `raw.client.request(...)`
        self.messages: list[Message] = []
        self.by_run: dict[str, list[Message]] = {}
        self.responses: dict[Any, list[Message]] = {}
        self.arrivals: list[tuple[float, str, str]] = []  # (monotonic time, runId, type) of pi/message
        self._cond = threading.Condition()
        #: Called (on the reader thread, outside the lock) with each request the bridge sends.
        self.on_request: Callable[[Message], None] | None = None
        self.start_reader("raw-bridge-reader")

    @property
    def pid(self) -> int:
        """The bridge's pid (not its fork server launcher's: /proc questions name the bridge)."""
        return bridge_pid(self.proc.pid)

    def kill_bridge(self) -> None:
        """SIGKILL the bridge itself by its pid (its launcher then ends as it did)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    @property
    def seen(self) -> list[Message]:
        """Every message read so far (the older harness's name for `messages`)."""
        with self._cond:
            return list(self.messages)

    # ------------------------------------------------------------------ writing

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request (params null when not given); return its id."""
        return self.send_request(method, params, msg_id)[0]

    # ------------------------------------------------------------------ reading

    def received(self, now: float, bodies: list[bytes]) -> None:
        parsed = [json.loads(body) for body in bodies]
        arrived = time.monotonic()
        with self._cond:
            for message in parsed:
                self.messages.append(message)
                if message.get("method") == "pi/message":
                    params = message["params"]
                    self.by_run.setdefault(params["runId"], []).append(params)
                    self.arrivals.append((arrived, params["runId"], params["type"]))
                elif "method" not in message:
                    self.responses.setdefault(message.get("id"), []).append(message)
            self._cond.notify_all()
        handler = self.on_request
        if handler is not None:
            for message in parsed:
                if "method" in message and "id" in message:
                    handler(message)

    def ended(self) -> None:
        with self._cond:
            super().ended()
            self._cond.notify_all()

    def wait_until(
        self, predicate: Callable[[], bool], timeout: float = WAIT, what: str = "condition"
    ) -> None:
        """Wait until predicate() (checked under the lock) holds; fail after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self.reader_error is not None:
                    raise AssertionError(f"bad output from the bridge: {self.reader_error!r}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{what} not met within {timeout} s")
                if self.eof:
                    raise AssertionError(f"the bridge closed its output before: {what}")
                self._cond.wait(remaining)

    def wait_for(self, predicate: Callable[[Message], bool], timeout: float = WAIT) -> Message:
        """Wait for the first message (earliest first, already read ones included) matching predicate."""
        found: list[Message] = []

        def matched() -> bool:
            found[:] = [m for m in self.messages if predicate(m)][:1]
            return bool(found)

        self.wait_until(matched, timeout, "a matching message")
        return found[0]

    def response(self, msg_id: Any, timeout: float = WAIT) -> Message:
        """Wait for the (first) response to `msg_id`."""
        self.wait_until(lambda: msg_id in self.responses, timeout, f"response to id {msg_id!r}")
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
        """Wait for the first pi/message of `kind` in run `run_id`; return its params."""
        self.wait_until(
            lambda: any(m["type"] == kind for m in self.by_run.get(run_id, [])),
            timeout,
            f"a {kind} message of run {run_id}",
        )
        return next(m for m in self.run_messages(run_id) if m["type"] == kind)

    message = wait_message  # the older harness's name

    def errors_with_null_id(self) -> list[Message]:
        """Error responses the bridge could not tie to a request (id null)."""
        with self._cond:
            return list(self.responses.get(None, []))

    # ------------------------------------------------------------------ lifecycle

    def answer(self, msg_id: Any, result: Any) -> None:
        """Answer a request the bridge sent."""
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def initialize(
        self, options: dict[str, Any] | None = None, capabilities: dict[str, Any] | None = None
    ) -> Message:
        """initialize + initialized; return the initialize answer."""
        answer = self.call(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": ROOT.as_uri(),
                "capabilities": capabilities or {},
                "initializationOptions": options,
            },
        )
        assert "result" in answer, answer
        self.notify("initialized", {})
        return answer

    def shutdown(self, timeout: float = WAIT) -> int:
        """shutdown + exit; return the exit code (fails, killing the bridge by pid, if it does not exit)."""
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
        """Wait for the bridge to exit; on timeout kill it (by its pid) and fail."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_bridge()
            self.proc.kill()
            self.proc.wait(WAIT)
            raise AssertionError(f"the bridge (pid {self.pid}) did not exit within {timeout} s") from None
        finally:
            self.join_reader(timeout)
            if self._stderr_handle is not None:
                self._stderr_handle.close()
        return code

    def stop(self, timeout: float = WAIT) -> int:
        """End the bridge's input (it then stops every run, tree and all) and wait for it to exit;
        fail (after killing it by pid) if it does not. Returns the exit code."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        self.resume_reading()
        self.close_stdin()
        return self.wait_exit(timeout)

    def close(self, timeout: float = WAIT, leak_timeout: float = 10.0) -> None:
        """Teardown: stop the bridge, then fail if any process of its runs is left after
        `leak_timeout` (they are killed)."""
        try:
            self.stop(timeout)
        finally:
            no_run_processes(self, leak_timeout)

    def kill(self) -> None:
        """Kill the bridge by its pid (a last resort), then check as `close()` does: a killed bridge
        cannot stop its runs, so anything they left fails the test."""
        if self.alive():
            self.kill_bridge()
        self.close()
