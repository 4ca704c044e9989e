"""Test harness: a pytest-lsp client that collects pi/message notifications, a raw stdio bridge,
the `requires_pi` marker, and the one leak checker.

Waits are on events with timeouts, never on sleeps. Process leak checks read /proc for processes
whose environment carries the current test's tag (every bridge a test starts gets it from
`bridge_env()`, and pi and all its descendants inherit it) and a run token; zombies count as dead.
tests/conftest.py gives every test a fresh tag and checks, at the test's end, that nothing
carrying it is left, so a leak fails the test that caused it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import attrs
import psutil
import pytest
from lsprotocol import types
from pygls.client import JsonRPCClient
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from bridge.fronts.lsp.converter import dict_converter
from bridge.fronts.lsp.writer import frame
from bridge.process.spawn import RUN_TOKEN_ENV
from bridge.tools.stdio_client import read_frame

ROOT = Path(__file__).resolve().parents[1]
FAKE_PI = ROOT / "tests" / "fakes" / "fake_pi.py"
PI_BIN = ROOT / ".tools" / "node_modules" / ".bin"
BRIDGE = [sys.executable, "-m", "bridge"]
TEST_TAG_ENV = "PI_BRIDGE_TEST_TAG"
#: Marks one RawBridge's processes, so its teardown checks its own runs only.
BRIDGE_MARKER_ENV = "PI_BRIDGE_TEST_BRIDGE"
WAIT = 30.0


class _Tag:
    """Leak tags: one per test (set by tests/conftest.py), and the session's, which bridges get
    when their environment is built outside any test (a pytest-lsp config built at import)."""

    session = uuid.uuid4().hex
    value = session


def current_test_tag() -> str:
    """The leak tag bridges started now get (the running test's)."""
    return _Tag.value


def begin_test_tag() -> str:
    """Give the test that starts now a fresh leak tag; return it."""
    _Tag.value = uuid.uuid4().hex
    return _Tag.value


def pi_requirement(found: bool, required: bool) -> pytest.MarkDecorator:
    """Skip when pi is not found, unless it is required (then the test runs, and fails)."""
    return pytest.mark.skipif(
        not found and not required,
        reason="real pi is not installed (run .ci/run, or set PI_BRIDGE_REQUIRE_PI=1 to make this fail)",
    )


def real_pi_available() -> bool:
    """Whether the real pi can run here (project-local install or PATH)."""
    return (PI_BIN / "pi").exists() or shutil.which("pi") is not None


#: The one marker for tests that run the real pi: PI_BRIDGE_REQUIRE_PI=1 turns a skip into a failure.
requires_pi = pi_requirement(real_pi_available(), os.environ.get("PI_BRIDGE_REQUIRE_PI") == "1")

#: Claude Code as scripts/setup.sh installs it (a prefix of its own: .tools is shared).
CLAUDE_BIN = ROOT / ".tools-claude" / "node_modules" / ".bin" / "claude"
#: The marker for tests that run the real Claude Code; PI_BRIDGE_REQUIRE_PI=1 requires it too.
requires_claude = pytest.mark.skipif(
    not CLAUDE_BIN.exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
    reason="Claude Code is not installed in .tools-claude (run scripts/setup.sh)",
)

CGROUP_REQUIRED_ENV = "PI_BRIDGE_REQUIRE_CGROUP"


def skip_without_cgroup(reason: str) -> None:
    """Skip a test that needs a writable cgroup hierarchy, or fail it when CI requires one.

    The only skip for a missing capability outside `requires_pi`: CI sets PI_BRIDGE_REQUIRE_CGROUP=1
    so that the cgroup mode can never pass by skipping there.
    """
    if os.environ.get(CGROUP_REQUIRED_ENV) == "1":
        pytest.fail(f"{reason}, and {CGROUP_REQUIRED_ENV}=1")
    pytest.skip(f"{reason} (set {CGROUP_REQUIRED_ENV}=1 to make this fail)")


def bridge_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a bridge under test: the current test's tag, pi on PATH, strict contract checks."""
    env = dict(os.environ)
    env[TEST_TAG_ENV] = current_test_tag()
    env["PI_BRIDGE_STRICT"] = "1"
    env["PATH"] = f"{PI_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PI_BRIDGE_LOG_LEVEL", "INFO")
    env.update(extra or {})
    return env


def fake_pi_command() -> list[str]:
    """The fake pi as a piCommand argv."""
    return [sys.executable, str(FAKE_PI)]


@attrs.define
class BridgeServerConfig(ClientServerConfig):
    """A pytest-lsp config whose bridge gets `bridge_env(extra_env)` when it starts, not at import
    (so it carries the leak tag of the test that starts it)."""

    extra_env: dict[str, str] = attrs.field(factory=dict)

    async def start(self, devtools: str | None = None) -> JsonRPCClient:
        self.server_env = bridge_env(self.extra_env)
        return await super().start(devtools)


def bridge_config(extra_env: dict[str, str] | None = None) -> BridgeServerConfig:
    """The config of a pytest-lsp bridge fixture: `@pytest_lsp.fixture(config=bridge_config())`."""
    return BridgeServerConfig(server_command=BRIDGE, client_factory=make_client, extra_env=extra_env or {})


class Messages:
    """pi/message notifications by runId, with event-driven waits."""

    def __init__(self) -> None:
        self.by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._changed = asyncio.Event()

    def add(self, params: dict[str, Any]) -> None:
        self.by_run[params["runId"]].append(params)
        self._changed.set()

    async def wait_until(self, predicate: Any, timeout: float = WAIT) -> None:
        """Wait until predicate() is true; fail after timeout."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition not met within {timeout} s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                continue

    async def wait_type(self, run_id: str, kind: str, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for the first message of `kind` in run `run_id`."""
        await self.wait_until(lambda: any(m["type"] == kind for m in self.by_run[run_id]), timeout)
        return next(m for m in self.by_run[run_id] if m["type"] == kind)


def make_client() -> LanguageClient:
    """A pytest-lsp client with plain-dict params and a pi/message collector."""
    client = LanguageClient(converter_factory=dict_converter)
    register_lsp_features(client)
    client.pi_messages = Messages()  # type: ignore[attr-defined]

    @client.feature("pi/message")
    def on_message(ls: LanguageClient, params: Any) -> None:
        ls.pi_messages.add(params)  # type: ignore[attr-defined]

    return client


def messages_of(client: LanguageClient) -> Messages:
    """The client's collector."""
    collected: Messages = client.pi_messages  # type: ignore[attr-defined]
    return collected


async def initialize(client: LanguageClient, options: dict[str, Any] | None = None) -> types.InitializeResult:
    """initialize + initialized with the given initializationOptions."""
    return await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options=options,
            root_uri=ROOT.as_uri(),
        )
    )


_next_id = 1000


async def request(client: LanguageClient, method: str, params: Any, msg_id: int | None = None) -> Any:
    """Send a request and wait (with a timeout) for its answer; JSON-RPC errors raise."""
    return await asyncio.wait_for(client.protocol.send_request_async(method, params, msg_id=msg_id), WAIT * 2)


def start_request(client: LanguageClient, method: str, params: Any) -> tuple[int, asyncio.Task[Any]]:
    """Send a request in a task with a known id (to cancel it); return (id, task)."""
    global _next_id
    _next_id += 1
    msg_id = _next_id
    task = asyncio.ensure_future(client.protocol.send_request_async(method, params, msg_id=msg_id))
    return msg_id, task


async def answer_or_error(
    task: asyncio.Task[Any], timeout: float = WAIT
) -> tuple[Any, JsonRpcException | None]:
    """Await a request task: (result, None) or (None, the JSON-RPC error)."""
    try:
        return await asyncio.wait_for(task, timeout), None
    except JsonRpcException as exc:
        return None, exc


def run_processes(
    tag: str | None = None, marker: str | None = None, *, orphans_only: bool = False
) -> list[psutil.Process]:
    """Live (non-zombie) processes of runs started under `tag` (default: the current test's, and
    the session's), of the RawBridge with `marker` only when given. Bridges carry the tag too; a
    run's processes also carry a run token. With `orphans_only`, processes under a live bridge
    (which is a subreaper, so its runs' orphans stay under it) are left out: they are its business
    until it stops (a module-scoped bridge outlives a test)."""
    tags = [tag] if tag else [current_test_tag(), _Tag.session]
    tag_needles = [f"{TEST_TAG_ENV}={value}".encode() for value in tags]
    needles = [f"{RUN_TOKEN_ENV}=".encode()]
    if marker is not None:
        needles.append(f"{BRIDGE_MARKER_ENV}={marker}".encode())
    found = []
    for pid in psutil.pids():
        try:
            environ = _environ(pid)
            if not any(n in environ for n in tag_needles) or not all(n in environ for n in needles):
                continue
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE or (orphans_only and _under_a_bridge(proc)):
                continue
            found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def _under_a_bridge(proc: psutil.Process) -> bool:
    """Whether a live bridge under test (tagged, without a run token) is an ancestor of `proc`."""
    for parent in proc.parents():
        try:
            environ = _environ(parent.pid)
        except OSError:
            continue
        if f"{TEST_TAG_ENV}=".encode() in environ and f"{RUN_TOKEN_ENV}=".encode() not in environ:
            return True
    return False


def tagged_processes() -> list[psutil.Process]:
    """Live processes of runs started under the current test's tag (or the session's)."""
    return run_processes()


def run_processes_alive(pids: list[int]) -> list[int]:
    """Which of these pids are alive and not zombies."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


async def warm_pids(client: LanguageClient) -> set[int]:
    """The bridge's idle warm-pool agents and live conversations' pis, with their descendants:
    alive on purpose, not of any run."""
    pids: set[int] = set()
    runs = await request(client, "pi/runs", None)
    for pid in [*runs["warmPids"], *(entry["pid"] for entry in runs.get("live", []))]:
        try:
            pids |= {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            continue
    return pids


def _leak_failure(left: list[psutil.Process], where: str) -> AssertionError:
    """Kill what is left (by pid, so it cannot leak into later tests) and describe it."""
    described = []
    for proc in left:
        try:
            described.append((proc.pid, " ".join(proc.cmdline())[:80]))
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(left, timeout=5)
    return AssertionError(f"processes of a run are still alive {where}: {described}")


def no_run_processes(
    bridge: RawBridge | None = None, timeout: float = 10.0, *, orphans_only: bool = False, where: str = ""
) -> None:
    """Fail if a process of a run (of `bridge`, else of every bridge of the current test) is alive
    after `timeout`; what is left is killed. `orphans_only`: see `run_processes`. Polls /proc:
    there is no event to wait on for another process's exit."""
    marker = bridge.marker if bridge is not None else None
    deadline = time.monotonic() + timeout
    while left := run_processes(marker=marker, orphans_only=orphans_only):
        if time.monotonic() > deadline:
            raise _leak_failure(left, where or (f"after bridge {bridge.pid}" if bridge else "after the test"))
        time.sleep(0.05)


async def assert_no_run_processes(timeout: float = 10.0, client: LanguageClient | None = None) -> None:
    """Fail if any process of a run of this test outlives it (polls /proc until the timeout).

    With `client`, that bridge's idle warm-pool agents are not counted (they belong to no run).
    """
    deadline = time.monotonic() + timeout
    while True:
        spare = await warm_pids(client) if client is not None else set()
        left = [proc for proc in run_processes() if proc.pid not in spare]
        if not left:
            return
        if time.monotonic() > deadline:
            raise _leak_failure(left, "")
        await asyncio.sleep(0.05)


def assert_stream_invariants(messages: list[dict[str, Any]]) -> None:
    """The contract's invariants for one run's messages."""
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), "seq must be gap-free"
    by_attempt: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        if message["type"] != "run.retrying":
            by_attempt[message["attempt"]].append(message)
    for attempt, items in by_attempt.items():
        terminals = [m for m in items if m["type"].startswith("terminal.")]
        assert len(terminals) == 1, f"attempt {attempt} has {len(terminals)} terminal messages"
        assert items[-1]["type"].startswith("terminal."), f"attempt {attempt} does not end with its terminal"
        open_tools: set[str] = set()
        for message in items:
            kind = message["type"]
            if kind == "tool.call":
                open_tools.add(message["content"]["toolCallId"])
            elif kind in ("tool.completed", "tool.failed"):
                open_tools.discard(message["content"]["toolCallId"])
            elif kind == "assistant.thought" and not message["content"].get("live"):
                assert not open_tools, "a thought arrived between a tool.call and its close"
        assert not open_tools, f"tool calls left open: {open_tools}"
        text = "".join(m["content"]["text"] for m in items if m["type"] == "assistant")
        assert terminals[0]["content"]["text"] == text, "deltas must concatenate to the terminal text"


Message = dict[str, Any]


class RawBridge:
    """A bridge process spoken to over raw stdio (lifecycle, framing, fuzz and load tests).

    It can send broken bytes and stop reading (outbound backpressure). One reader thread parses
    frames into `messages`; waits are on a condition variable with a timeout. Teardown is
    `close()`: end of input, exit within the timeout (else the bridge is killed by its pid and the
    test fails), and no process of its runs left (else they are killed and the test fails).
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
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_handle,
            env=self.env,
            cwd=ROOT,
        )
        self.client = self  # the older harness spelled requests `raw.client.request(...)`
        self.messages: list[Message] = []
        self.by_run: dict[str, list[Message]] = {}
        self.responses: dict[Any, list[Message]] = {}
        self.arrivals: list[tuple[float, str, str]] = []  # (monotonic time, runId, type) of pi/message
        self.eof = False
        self.reader_error: BaseException | None = None
        self._cond = threading.Condition()
        self._reading = threading.Event()
        self._reading.set()
        # Set while the reader thread waits for resume_reading: a pause takes effect only after
        # the frame being read when it came (a frame can be megabytes).
        self.reader_parked = threading.Event()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read_loop, name="raw-bridge-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The bridge's pid."""
        return self.proc.pid

    @property
    def seen(self) -> list[Message]:
        """Every message read so far (the older harness's name for `messages`)."""
        with self._cond:
            return list(self.messages)

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
        """Write one framed JSON message (UTF-8, not ASCII-escaped)."""
        self.send_bytes(frame(json.dumps(payload, ensure_ascii=False).encode("utf-8")))

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
                if not self._reading.is_set():
                    self.reader_parked.set()
                    self._reading.wait()
                    self.reader_parked.clear()
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

    def initialize(self, options: dict[str, Any] | None = None) -> Message:
        """initialize + initialized; return the initialize answer."""
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
            self.proc.kill()
            self.proc.wait(WAIT)
            raise AssertionError(f"the bridge (pid {self.pid}) did not exit within {timeout} s") from None
        finally:
            self._reader.join(timeout)
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

    def close(self, timeout: float = WAIT) -> None:
        """Teardown: stop the bridge, then fail if any process of its runs is left (they are killed)."""
        try:
            self.stop(timeout)
        finally:
            no_run_processes(self)

    def kill(self) -> None:
        """Kill the bridge by its pid (a last resort), then check as `close()` does: a killed bridge
        cannot stop its runs, so anything they left fails the test."""
        if self.alive():
            self.proc.kill()
        self.close()


async def wait_for_run_process(fragment: str, timeout: float = WAIT) -> psutil.Process:
    """Wait until a process of a run whose command line contains `fragment` is alive."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in tagged_processes():
            try:
                if fragment in " ".join(proc.cmdline()):
                    return proc
            except psutil.Error:
                continue
        if time.monotonic() > deadline:
            raise AssertionError(f"no run process matching {fragment!r} within {timeout} s")
        await asyncio.sleep(0.02)


# A 1x1 PNG, base64: an image for a prompt.
PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def image_urls(body: dict[str, Any]) -> list[str]:
    """The image parts of a model request's user messages (OpenAI's chat format), as data URLs."""
    urls: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            urls += [
                p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"
            ]
    return urls


def times_seen(body: dict[str, Any], tag: str, *words: str) -> list[int]:
    """How many times one model request's user messages hold each `word-tag` (an agent may join
    several user messages in one)."""
    texts: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            texts += [str(part.get("text") or "") for part in parts if isinstance(part, dict)]
    seen = "\n".join(texts)
    return [seen.count(f"{word}-{tag}") for word in words]
