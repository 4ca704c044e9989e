"""The first frame of `pi-bridge acp`: a plain `initialize`, answered before the ACP SDK is loaded."""

from __future__ import annotations

import copy
import json
import os
import select
import threading
from collections.abc import Callable
from typing import Any, Final

from bridge import __version__
from bridge.fronts.surrogates import refusal

ACP_PROTOCOL_VERSION: Final = 1  # the SDK's acp.PROTOCOL_VERSION (a test checks they agree)
AGENT_NAME: Final = "pi-bridge"
EXT_METHODS: Final = ("_pi/steer", "_pi/rewind_points", "_pi/rewind", "_session/steering", "_session/rewind")
# initialize's parameter names: `_meta` keys are handed to the handler as keyword arguments, so a
# `_meta` naming one of them (or the bridge's settings) is the SDK path's to answer.
_RESERVED_META: Final = frozenset(
    {"self", "protocol_version", "client_capabilities", "client_info", "piBridge"}
)
# The API keys pi reads from its environment for the common providers (pi's docs/providers.md);
# any one of them is enough, so each is optional and `authenticate` asks for at least one.
API_KEY_VARS: Final = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
ENV_AUTH_ID: Final = "pi-api-key"
TERMINAL_AUTH_ID: Final = "pi-login"
# The ACP Registry's CI wants an auth method in initialize: an API key in the agent's environment,
# or pi's own `pi auth login` run in the client's terminal (`pi-bridge acp --login`).
AUTH_METHODS: Final = (
    {
        "type": "env_var",
        "id": ENV_AUTH_ID,
        "name": "API key",
        "description": "A model provider's API key in pi's environment (one is enough).",
        "vars": [{"name": name, "label": name, "secret": True, "optional": True} for name in API_KEY_VARS],
    },
    {
        "type": "terminal",
        "id": TERMINAL_AUTH_ID,
        "name": "Log in with pi",
        "description": "Run pi's own login (`pi auth login`) in a terminal; pi keeps the credentials.",
        "args": ["--login"],
    },
)
_READ_CHUNK: Final = 1 << 16
# An initialize is a few hundred bytes; a longer first line is the SDK path's to parse (once).
_MAX_PLAIN_BYTES: Final = 1 << 16


def initialize_result(protocol_version: int) -> dict[str, Any]:
    """The result of `initialize` for a client at `protocol_version`, as it goes on the wire."""
    return {
        "protocolVersion": min(protocol_version, ACP_PROTOCOL_VERSION),
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "sessionCapabilities": {"list": {}, "close": {}, "resume": {}, "delete": {}, "fork": {}},
            # stdio is every agent's; http servers are handed on too, sse ones refused
            "mcpCapabilities": {"http": True, "sse": False},
        },
        "authMethods": copy.deepcopy(list(AUTH_METHODS)),
        "agentInfo": {"name": AGENT_NAME, "title": "pi (via pi-bridge)", "version": __version__},
        # The bridge's extension methods (docs/acp.md): steering, and checkpoints and rewind, also
        # under the names claude-agent-acp and codex-acp share (`steering.supported` says so).
        "_meta": {
            "piBridge": {"extMethods": [*EXT_METHODS]},
            "steering": {"supported": True},
        },
    }


def plain_initialize(line: bytes) -> dict[str, Any] | None:
    """The answer frame to `line` if it is a plain `initialize` request, else None."""
    if len(line) > _MAX_PLAIN_BYTES:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or refusal(message) is not None:
        return None
    msg_id = message.get("id")
    if message.get("method") != "initialize" or isinstance(msg_id, bool):
        return None
    if not isinstance(msg_id, (str, int)):
        return None
    version = _plain_version(message.get("params"))
    if version is None:
        return None
    return {"jsonrpc": "2.0", "id": msg_id, "result": initialize_result(version)}


def _plain_version(params: Any) -> int | None:
    """The protocol version of plain `initialize` params (nothing the SDK would read otherwise)."""
    if not isinstance(params, dict):
        return None
    version = params.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= 65535:
        return None
    meta = params.get("_meta")
    if meta is not None and (not isinstance(meta, dict) or _RESERVED_META & meta.keys()):
        return None
    for name in ("clientCapabilities", "clientInfo"):
        if not isinstance(params.get(name), (dict, type(None))):
            return None
    return version


class FirstFrame:
    """A thread that reads stdin up to its first newline and answers a plain `initialize`.

    `rest` is what it read and did not answer (the SDK path reads it first), `eof` whether stdin
    ended meanwhile. `when_done` calls back once the thread is done (at once if it is).
    """

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self._in = stdin_fd
        self._out = stdout_fd
        self.rest = b""
        self.eof = False
        self.answered = False
        #: The answered initialize's `clientCapabilities` (what the client can be asked).
        self.client_capabilities: Any = None
        self._lock = threading.Lock()
        self._done = False
        self._callbacks: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name="acp-first-frame", daemon=True)

    @classmethod
    def start(cls) -> FirstFrame:
        """Start reading stdin now."""
        first = cls()
        first._thread.start()
        return first

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from the reading thread, or here if it is done already)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def _run(self) -> None:
        try:
            data = self._read_first_line()
            self.rest = data  # whatever happens next, nothing read is lost
            newline = data.find(b"\n")
            if newline >= 0:
                answer = plain_initialize(data[:newline])
                frame = json.dumps(answer, separators=(",", ":")).encode() + b"\n" if answer else b""
                if frame and self._write(frame):
                    self.answered = True
                    self.client_capabilities = json.loads(data[:newline])["params"].get("clientCapabilities")
                    self.rest = data[newline + 1 :]
        finally:
            with self._lock:
                self._done = True
                callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback()

    def _read_first_line(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(self._in, _READ_CHUNK)
            except BlockingIOError:
                select.select([self._in], [], [])
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                return b"".join(chunks)
            chunks.append(chunk)
            if b"\n" in chunk:
                return b"".join(chunks)

    def _write(self, data: bytes) -> bool:
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(self._out, view) :]
                except BlockingIOError:
                    select.select([], [self._out], [])
        except OSError:
            return False
        return True
