"""A minimal JSON-RPC 2.0 client with LSP framing over a child process's stdio.

The one client-side framing of the project: `pi-bridge demo` drives the bridge with it, and the
tests and benchmarks that need raw frames (broken ones included) use `encode` and `read_frame`.
"""

from __future__ import annotations

import json
import subprocess
import threading
from typing import IO, Any

from bridge.fronts.lsp.writer import frame


def encode(message: dict[str, Any]) -> bytes:
    """One message as a framed JSON body."""
    return frame(json.dumps(message).encode())


def read_frame(stream: IO[bytes]) -> dict[str, Any] | None:
    """Read one framed message; None at end of output. A line that is not a header, a frame
    without Content-Length, or output ending inside a body raise ValueError."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, colon, value = line.decode("ascii", "replace").partition(":")
        if not colon:
            raise ValueError(f"not a frame header line: {line[:200]!r}")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise ValueError("a frame without Content-Length")
    body = stream.read(length)
    if len(body) != length:
        raise ValueError("the output ended inside a frame")
    message: dict[str, Any] = json.loads(body)
    return message


class StdioClient:
    """A minimal JSON-RPC 2.0 client with LSP framing over a child's stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._next_id = 0
        self._lock = threading.Lock()

    def send(self, payload: dict[str, Any]) -> None:
        """Write one framed message."""
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(encode(payload))
        stdin.flush()

    def request(self, method: str, params: Any) -> int:
        """Send a request; return its id."""
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def notify(self, method: str, params: Any) -> None:
        """Send a notification."""
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def read(self) -> dict[str, Any] | None:
        """Read the next message, or None at end of output."""
        stdout = self.proc.stdout
        assert stdout is not None
        return read_frame(stdout)

    def wait_for(self, msg_id: int, on_message: Any = None) -> dict[str, Any]:
        """Read until the response to `msg_id`, passing every other message to `on_message`."""
        while True:
            message = self.read()
            if message is None:
                raise RuntimeError("the bridge closed its output before answering")
            if message.get("id") == msg_id and "method" not in message:
                return message
            if on_message is not None:
                on_message(message)

    def close(self) -> int:
        """Shut the bridge down politely and return its exit code."""
        try:
            msg_id = self.request("shutdown", None)
            self.wait_for(msg_id)
            self.notify("exit", None)
        except (BrokenPipeError, RuntimeError):
            pass
        return self.proc.wait(timeout=15)
