"""Test harness: a pytest-lsp client that collects pi/message notifications, and leak checks.

Waits are on events with timeouts, never on sleeps. Process leak checks read /proc for processes
whose environment carries this test session's tag (every bridge the tests start sets it, and pi
and all its descendants inherit it); zombies count as dead.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from pytest_lsp.client import register_lsp_features

from bridge.wire import dict_converter

ROOT = Path(__file__).resolve().parents[1]
FAKE_PI = ROOT / "tests" / "fakes" / "fake_pi.py"
PI_BIN = ROOT / ".tools" / "node_modules" / ".bin"
TEST_TAG_ENV = "PI_BRIDGE_TEST_TAG"
TEST_TAG = uuid.uuid4().hex
WAIT = 30.0


def bridge_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a bridge under test: the session tag, pi on PATH, strict contract checks."""
    env = dict(os.environ)
    env[TEST_TAG_ENV] = TEST_TAG
    env["PI_BRIDGE_STRICT"] = "1"
    env["PATH"] = f"{PI_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PI_BRIDGE_LOG_LEVEL", "INFO")
    env.update(extra or {})
    return env


def fake_pi_command() -> list[str]:
    """The fake pi as a piCommand argv."""
    return [sys.executable, str(FAKE_PI)]


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


def tagged_processes() -> list[psutil.Process]:
    """Live (non-zombie) processes started under this test session's tag, other than bridges."""
    needle = f"{TEST_TAG_ENV}={TEST_TAG}".encode()
    found = []
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
            # The bridge itself carries the tag too; a run's processes also carry a run token.
            if needle not in environ or b"PI_BRIDGE_RUN_TOKEN=" not in environ:
                continue
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


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


async def assert_no_run_processes(timeout: float = 10.0, client: LanguageClient | None = None) -> None:
    """Fail if any process of a run outlives it (polls /proc until the timeout).

    With `client`, that bridge's idle warm-pool agents are not counted (they belong to no run).
    """
    deadline = time.monotonic() + timeout
    while True:
        spare = await warm_pids(client) if client is not None else set()
        left = [proc for proc in tagged_processes() if proc.pid not in spare]
        if not left:
            return
        if time.monotonic() > deadline:
            described = [(p.pid, " ".join(p.cmdline())[:80]) for p in left if p.is_running()]
            raise AssertionError(f"processes of a run are still alive: {described}")
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


class RawBridge:
    """A bridge process driven over raw stdio by a reader thread (for lifecycle and framing tests)."""

    def __init__(self, args: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        import queue
        import subprocess
        import threading

        from bridge.stdio_client import StdioClient

        self.client = StdioClient([sys.executable, "-m", "bridge", *(args or [])], env=bridge_env(env))
        self.proc: subprocess.Popen[bytes] = self.client.proc
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                message = self.client.read()
            except (OSError, ValueError):
                message = None
            self.inbox.put(message)
            if message is None:
                return

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for a message matching predicate (earlier ones stay in `seen`)."""
        import queue

        for message in self.seen:
            if predicate(message):
                return message
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching message within {timeout} s")
            try:
                message = self.inbox.get(timeout=remaining)
            except queue.Empty:
                continue
            if message is None:
                raise AssertionError("the bridge closed its output")
            self.seen.append(message)
            if predicate(message):
                return message

    def initialize(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """initialize + initialized."""
        msg_id = self.client.request(
            "initialize",
            {"processId": os.getpid(), "rootUri": None, "capabilities": {}, "initializationOptions": options},
        )
        answer = self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)
        self.client.notify("initialized", {})
        return answer

    def response(self, msg_id: int, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for the response to a request."""
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def message(self, run_id: str, kind: str, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for a pi/message of `kind` for run `run_id`."""
        return self.wait_for(
            lambda m: (
                m.get("method") == "pi/message"
                and m["params"]["runId"] == run_id
                and m["params"]["type"] == kind
            ),
            timeout,
        )["params"]

    def wait_exit(self, timeout: float = WAIT) -> int:
        """Wait for the bridge process to exit; return its code."""
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Kill the bridge if it is still running (test cleanup)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)


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
