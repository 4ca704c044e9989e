"""The pytest-lsp client side: a bridge fixture's config, the pi/message collector, and requests
with timeouts."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
from lsprotocol import types
from pygls.client import JsonRPCClient
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from bridge.fronts.lsp.converter import dict_converter
from tests.support.env import BRIDGE, EXEC_BRIDGE, ROOT, WAIT, bridge_env
from tests.support.streams import assert_stream_invariants


@attrs.define
class BridgeServerConfig(ClientServerConfig):
    """A pytest-lsp config whose bridge gets `bridge_env(extra_env)` when it starts, not at import
    (so it carries the leak tag of the test that starts it)."""

    extra_env: dict[str, str] = attrs.field(factory=dict)

    async def start(self, devtools: str | None = None) -> JsonRPCClient:
        self.server_env = bridge_env(self.extra_env)
        return await super().start(devtools)


def bridge_config(
    extra_env: dict[str, str] | None = None,
    client_factory: Callable[[], LanguageClient] | None = None,
    *,
    by_exec: bool = False,
) -> BridgeServerConfig:
    """The config of a pytest-lsp bridge fixture: `@pytest_lsp.fixture(config=bridge_config())`.
    `by_exec`: a fresh interpreter rather than the fork server, for a test that measures the
    bridge process's own memory (a forked process's pages are laid out by its parent)."""
    return BridgeServerConfig(
        server_command=EXEC_BRIDGE if by_exec else BRIDGE,
        client_factory=client_factory or make_client,
        extra_env=extra_env or {},
    )


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


async def scripted_run(client: LanguageClient, cwd: Any, model: str, **params: Any) -> tuple[Any, list[Any]]:
    """One pi/run of scripted `model` in `cwd`: its answer and its messages (invariants checked)."""
    result = await request(
        client, "pi/run", {"prompt": "go", "provider": "fake", "model": model, "cwd": str(cwd), **params}
    )
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


def contents_of(messages: list[Any], kind: str) -> list[Any]:
    """The contents of the messages of type `kind`, in order."""
    return [m["content"] for m in messages if m["type"] == kind]
