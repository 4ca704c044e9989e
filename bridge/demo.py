"""`pi-bridge demo`: one real run through a real bridge process, printed readably.

It starts `python -m bridge --scripted-model` (the bridge plus its built-in scripted model, with
a throwaway pi agent dir), speaks JSON-RPC to it over stdio like any editor would, runs one
prompt through the real pi, and prints every normalized `pi/message` as it arrives.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from typing import IO, Any

_COLORS = {
    "assistant": "",
    "assistant.thought": "\033[2m",
    "tool.call": "\033[36m",
    "tool.update": "\033[2;36m",
    "tool.completed": "\033[32m",
    "tool.failed": "\033[31m",
    "terminal.completed": "\033[1;32m",
    "terminal.failed": "\033[1;31m",
    "terminal.cancelled": "\033[1;33m",
}


class StdioClient:
    """A minimal JSON-RPC 2.0 client with LSP framing over a child's stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._next_id = 0
        self._lock = threading.Lock()

    def send(self, payload: dict[str, Any]) -> None:
        """Write one framed message."""
        body = json.dumps(payload).encode()
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
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
        stdout: IO[bytes] | None = self.proc.stdout
        assert stdout is not None
        length = None
        while True:
            line = stdout.readline()
            if not line:
                return None
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        if length is None:
            return None
        message: dict[str, Any] = json.loads(stdout.read(length))
        return message

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


def _print_message(message: dict[str, Any], out: IO[str]) -> None:
    if message.get("method") != "pi/message":
        return
    params = message["params"]
    kind = params["type"]
    content = params["content"]
    color = _COLORS.get(kind, "\033[35m") if out.isatty() else ""
    reset = "\033[0m" if color else ""
    if kind == "assistant":
        out.write(content["text"])
    elif kind == "assistant.thought":
        out.write(f"\n{color}[thought] {content['text']}{reset}\n")
    elif kind == "tool.call":
        out.write(f"\n{color}[tool.call {content['name']}] {json.dumps(content['arguments'])}{reset}\n")
    elif kind == "tool.update":
        pass
    elif kind in ("tool.completed", "tool.failed"):
        body = content.get("output", content.get("error", ""))
        out.write(f"{color}[{kind}] {body.strip()[:500]}{reset}\n")
    elif kind.startswith("terminal."):
        detail = {k: v for k, v in content.items() if k != "text"}
        out.write(f"\n{color}[{kind}] {json.dumps(detail)}{reset}\n")
    else:
        out.write(f"{color}[{kind}] {json.dumps(content)}{reset}\n")
    out.flush()


def run_demo(prompt: str, *, model: str = "tool", pi_command: str | None = None) -> int:
    """Run `prompt` through the bridge and real pi against the scripted model; print the stream."""
    argv = [sys.executable, "-m", "bridge", "--scripted-model"]
    if pi_command:
        argv += ["--pi-command", pi_command]
    client = StdioClient(argv, env=dict(os.environ))
    out = sys.stdout
    try:
        init = client.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {}})
        answer = client.wait_for(init)
        info = answer["result"]["serverInfo"]
        out.write(
            f"# {info['name']} {info.get('version', '')} — protocol "
            f"{answer['result']['capabilities']['experimental']['piBridge']['protocolVersion']}\n"
        )
        client.notify("initialized", {})
        out.write(f"# prompt: {prompt!r} (scripted model scenario {model!r}; argv {shlex.join(argv)})\n\n")
        run = client.request("pi/run", {"prompt": prompt, "model": model})
        response = client.wait_for(run, lambda message: _print_message(message, out))
    finally:
        code = client.close()
    if "error" in response:
        out.write(f"\n# pi/run error: {json.dumps(response['error'])}\n")
        return 1
    result = response["result"]
    out.write(
        f"\n# result: status={result['status']} attempts={result['attempts']} "
        f"stopReason={result.get('stopReason')} usage={json.dumps(result.get('usage'))}\n"
    )
    return 0 if result["status"] == "completed" and code == 0 else 1
