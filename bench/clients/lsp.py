"""A fast raw JSON-RPC client with LSP framing, for driving the bridge (and the floor) over stdio."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import orjson

from bench.clients.inbox import Inbox
from bridge.tools.stdio_client import StdioPeer

NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":"pi/message"'
Message = dict[str, Any]


class LspClient(StdioPeer, Inbox):
    """Spawn a server and talk JSON-RPC to it; `keep_messages` parses and keeps pi/message."""

    peer = "the server"
    dumps = staticmethod(orjson.dumps)

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        keep_messages: bool = True,
        stderr: Any = subprocess.DEVNULL,
    ) -> None:
        super().__init__(argv, env=env, cwd=cwd, stderr=stderr)
        self.keep_messages = keep_messages
        self.notifications = 0
        self.notification_bytes = 0
        self.first_notification_at: float | None = None
        self.messages: list[tuple[float, Message]] = []
        self.responses: dict[Any, tuple[float, Message]] = {}
        self.other: list[tuple[float, Message]] = []
        self._cond = threading.Condition()
        self.start_reader("lsp-reader")

    def request(self, method: str, params: Any) -> tuple[int, float]:
        """Send a request; return (id, time sent)."""
        msg_id: int
        msg_id, sent = self.send_request(method, params)
        return msg_id, sent

    # ------------------------------------------------------------------ waiting

    def wait_message(
        self, predicate: Callable[[Message], bool], start: int = 0, timeout: float = 60.0
    ) -> tuple[int, float, Message]:
        """Wait for a kept pi/message matching predicate at index >= start; return (index, time, msg)."""
        return self.wait_indexed(self.messages, predicate, start, timeout)

    def initialize(
        self,
        options: dict[str, Any] | None = None,
        timeout: float = 60.0,
        root_uri: str | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> tuple[float, Message]:
        """initialize + initialized; return (time answered, answer)."""
        msg_id, _ = self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root_uri,
                "capabilities": capabilities or {},
                "initializationOptions": options,
            },
        )
        answered = self.wait_response(msg_id, timeout)
        self.notify("initialized", {})
        return answered

    def close(self, timeout: float = 15.0) -> int | None:
        """shutdown + exit, then wait for the process (killed by pid if it does not exit)."""
        try:
            if self.proc.poll() is None:
                msg_id, _ = self.request("shutdown", None)
                self.wait_response(msg_id, timeout)
                self.notify("exit", None)
                self.close_stdin()
        except (OSError, TimeoutError, EOFError):
            pass
        return self.wait_exit(timeout)

    # ------------------------------------------------------------------ reading

    def received(self, now: float, bodies: list[bytes]) -> None:
        parsed: list[Message] = []
        for body in bodies:
            if body.startswith(NOTIFICATION_PREFIX):
                self.notifications += 1
                self.notification_bytes += len(body)
                if self.first_notification_at is None:
                    self.first_notification_at = now
                if not self.keep_messages:
                    continue
            parsed.append(orjson.loads(body))
        if parsed:
            with self._cond:
                for message in parsed:
                    if message.get("method") == "pi/message":
                        self.messages.append((now, message))
                    elif "id" in message and "method" not in message:
                        self.responses[message["id"]] = (now, message)
                    else:
                        self.other.append((now, message))
                self._cond.notify_all()

    def ended(self) -> None:
        with self._cond:
            super().ended()
            self._cond.notify_all()
