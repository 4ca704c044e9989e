"""A fast raw JSON-RPC client with LSP framing, for driving the bridge (and the floor) over stdio.

A reader thread parses frames; `pi/message` notifications are only counted unless the client
was asked to keep them (parsing 100,000 of them would make the client, not the server, the
bottleneck). Everything else is parsed and timestamped with time.perf_counter() on arrival.
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

NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":"pi/message"'
Message = dict[str, Any]


class LspClient(Inbox):
    """Spawn a server and talk JSON-RPC to it; `keep_messages` parses and keeps pi/message."""

    peer = "the server"

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        keep_messages: bool = True,
        stderr: Any = subprocess.DEVNULL,
    ) -> None:
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd, bufsize=0
        )
        self.pid = self.proc.pid
        self.keep_messages = keep_messages
        self.notifications = 0
        self.notification_bytes = 0
        self.first_notification_at: float | None = None
        self.messages: list[tuple[float, Message]] = []
        self.responses: dict[Any, tuple[float, Message]] = {}
        self.other: list[tuple[float, Message]] = []
        self.eof = False
        self._cond = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="lsp-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ sending

    def send(self, payload: Message) -> float:
        """Write one framed message; return the time it was written."""
        body = orjson.dumps(payload)
        stdin = self.proc.stdin
        assert stdin is not None
        data = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        sent = time.perf_counter()
        stdin.write(data)
        return sent

    def request(self, method: str, params: Any) -> tuple[int, float]:
        """Send a request; return (id, time sent)."""
        self._next_id += 1
        msg_id = self._next_id
        return msg_id, self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})

    def notify(self, method: str, params: Any) -> float:
        """Send a notification; return the time sent."""
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # ------------------------------------------------------------------ waiting

    def wait_message(
        self, predicate: Callable[[Message], bool], start: int = 0, timeout: float = 60.0
    ) -> tuple[int, float, Message]:
        """Wait for a kept pi/message matching predicate at index >= start; return (index, time, msg)."""
        return self.wait_indexed(self.messages, predicate, start, timeout)

    def initialize(
        self, options: dict[str, Any] | None = None, timeout: float = 60.0, root_uri: str | None = None
    ) -> tuple[float, Message]:
        """initialize + initialized; return (time answered, answer)."""
        msg_id, _ = self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root_uri,
                "capabilities": {},
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
                assert self.proc.stdin is not None
                self.proc.stdin.close()
        except (OSError, TimeoutError, EOFError):
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    # ------------------------------------------------------------------ reading

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
            buf = buf + chunk if buf else chunk
            pos = 0
            parsed: list[Message] = []
            while True:
                head_end = buf.find(b"\r\n\r\n", pos)
                if head_end < 0:
                    break
                length = -1
                for line in buf[pos:head_end].split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body_start = head_end + 4
                if length < 0 or body_start + length > len(buf):
                    break
                body = buf[body_start : body_start + length]
                pos = body_start + length
                if body.startswith(NOTIFICATION_PREFIX):
                    self.notifications += 1
                    self.notification_bytes += length
                    if self.first_notification_at is None:
                        self.first_notification_at = now
                    if not self.keep_messages:
                        continue
                parsed.append(orjson.loads(body))
            buf = buf[pos:]
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
        with self._cond:
            self.eof = True
            self._cond.notify_all()
