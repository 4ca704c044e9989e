"""A small Agent Client Protocol client over stdio (newline-delimited JSON-RPC), for pi-acp.

It speaks the client side of ACP v1: initialize, session/new, session/prompt, session/cancel,
session/set_model, and records every session/update notification with its arrival time. Requests
from the agent are answered: a permission request picks the first allow option, anything else
gets a JSON-RPC "method not found" error.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.common import Inbox

Message = dict[str, Any]


class AcpClient(Inbox):
    """Spawn an ACP agent and talk to it."""

    peer = "the ACP agent"

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            bufsize=0,
        )
        self.pid = self.proc.pid
        self.updates: list[tuple[float, Message]] = []
        self.responses: dict[Any, tuple[float, Message]] = {}
        self.eof = False
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="acp-reader", daemon=True)
        self._reader.start()

    def _send(self, payload: Message) -> float:
        data = orjson.dumps(payload) + b"\n"
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            sent = time.perf_counter()
            stdin.write(data)
        return sent

    def request(self, method: str, params: Any) -> tuple[int, float]:
        """Send a request; return (id, time sent)."""
        self._next_id += 1
        return self._next_id, self._send(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )

    def notify(self, method: str, params: Any) -> float:
        """Send a notification; return the time sent."""
        return self._send({"jsonrpc": "2.0", "method": method, "params": params})

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

    def close(self, timeout: float = 5.0) -> None:
        """Close stdin and wait; kill the agent by pid if it does not exit."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

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
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
        else:
            self._send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": f"{method} not supported"},
                }
            )

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        buf = b""
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            now = time.perf_counter()
            buf += chunk
            *lines, buf = buf.split(b"\n")
            parsed = [orjson.loads(line) for line in lines if line.strip()]
            with self._cond:
                for message in parsed:
                    if "method" in message and "id" in message:
                        self._answer_agent_request(message)
                    elif "method" in message:
                        if message["method"] == "session/update":
                            self.updates.append((now, message.get("params", {}).get("update", {})))
                    else:
                        self.responses[message.get("id")] = (now, message)
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()
