"""A small Agent Client Protocol client over stdio (newline-delimited JSON-RPC), for pi-acp."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any

import orjson

from bench.clients.inbox import Inbox
from bridge.tools.stdio_client import NDJSON, StdioPeer

Message = dict[str, Any]


class AcpClient(StdioPeer, Inbox):
    """Spawn an ACP agent and talk to it."""

    peer = "the ACP agent"
    dumps = staticmethod(orjson.dumps)

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        super().__init__(argv, framing=NDJSON, env=env, cwd=cwd, stderr=subprocess.DEVNULL)
        self.updates: list[tuple[float, Message]] = []
        #: The agent's requests (a permission asked for, ...), each answered as it came.
        self.asked: list[tuple[float, Message]] = []
        self.responses: dict[Any, tuple[float, Message]] = {}
        self._cond = threading.Condition()
        self.start_reader("acp-reader")

    def request(self, method: str, params: Any) -> tuple[int, float]:
        """Send a request; return (id, time sent)."""
        msg_id: int
        msg_id, sent = self.send_request(method, params)
        return msg_id, sent

    def call(self, method: str, params: Any, timeout: float = 60.0) -> tuple[float, float, Message]:
        """Request and wait; return (time sent, time answered, answer)."""
        msg_id, sent = self.request(method, params)
        answered, answer = self.wait_response(msg_id, timeout)
        return sent, answered, answer

    def wait_update(
        self, predicate: Callable[[Message], bool], start: int = 0, timeout: float = 60.0
    ) -> tuple[int, float, Message]:
        """Wait for a session/update whose `update` matches predicate, at index >= start."""
        return self.wait_indexed(self.updates, predicate, start, timeout)

    def wait_until(self, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        """Wait until `ready()` holds (checked as each message arrives); TimeoutError at EOF too."""
        with self._cond:
            if not self._cond.wait_for(lambda: ready() or self.eof, timeout) or not ready():
                raise TimeoutError(f"what was waited for did not come from {self.peer} within {timeout} s")

    def close(self, timeout: float = 5.0) -> None:
        """Close stdin and wait; kill the agent by pid if it does not exit."""
        try:
            self.close_stdin()
        except OSError:
            pass
        self.wait_exit(timeout)

    def _answer_agent_request(self, message: Message) -> None:
        method = message.get("method")
        if method == "session/request_permission":
            options = message.get("params", {}).get("options", [])
            allow = next(
                (o for o in options if str(o.get("kind", "")).startswith("allow")),
                options[0] if options else None,
            )
            outcome = (
                {"outcome": "selected", "optionId": allow["optionId"]} if allow else {"outcome": "cancelled"}
            )
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
        else:
            self.send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": f"{method} not supported"},
                }
            )

    def received(self, now: float, bodies: list[bytes]) -> None:
        parsed = [orjson.loads(line) for line in bodies if line.strip()]
        with self._cond:
            for message in parsed:
                if "method" in message and "id" in message:
                    self.asked.append((now, message))
                    self._answer_agent_request(message)
                elif "method" in message:
                    if message["method"] == "session/update":
                        self.updates.append((now, message.get("params", {}).get("update", {})))
                else:
                    self.responses[message.get("id")] = (now, message)
            self._cond.notify_all()

    def ended(self) -> None:
        with self._cond:
            super().ended()
            self._cond.notify_all()
