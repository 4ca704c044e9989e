"""A stdio proxy in front of the real bridge that plays what the bridge does for an agent's write
to a file the user holds dirty: once the client has sent didOpen and then didChange for a file
named `dirty.txt`, it sends the client a standard `workspace/applyEdit` (line 2 replaced) and
keeps the client's answer. Every frame in either direction is passed on unchanged otherwise.

Usage: python3 apply_edit_proxy.py <record.jsonl> <bridge command...>. The record gets one JSON
line per event the test reads: `initialize` (the client's workspace.applyEdit), `didOpen`,
`didChange` (of dirty.txt) and `applied` (the client's answer to the request).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO, Any

EDIT_ID = "apply-edit-proxy-1"


def read_frame(stream: IO[bytes]) -> bytes | None:
    """One LSP frame's body, or None at the end of the stream."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return stream.read(length or 0)


def write_frame(stream: IO[bytes], body: bytes, lock: threading.Lock) -> None:
    """Write one LSP frame, whole, under `lock` (two threads write to the client)."""
    with lock:
        stream.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        stream.flush()


def main() -> int:
    """Run the bridge and proxy its stdio until the client closes it."""
    record_path, command = sys.argv[1], sys.argv[2:]
    bridge = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert bridge.stdin is not None and bridge.stdout is not None
    to_client = sys.stdout.buffer
    client_lock = threading.Lock()
    record = open(record_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the proxy's life

    def note(event: dict[str, Any]) -> None:
        record.write(json.dumps(event) + "\n")
        record.flush()

    def bridge_to_client() -> None:
        while (body := read_frame(bridge.stdout)) is not None:  # type: ignore[arg-type]
            write_frame(to_client, body, client_lock)

    threading.Thread(target=bridge_to_client, daemon=True).start()
    opened = sent = False
    while (body := read_frame(sys.stdin.buffer)) is not None:
        message = json.loads(body)
        method = message.get("method")
        params = message.get("params") or {}
        if method == "initialize":
            workspace = params.get("capabilities", {}).get("workspace", {})
            note({"event": "initialize", "applyEdit": workspace.get("applyEdit")})
        uri = params.get("textDocument", {}).get("uri", "")
        if method == "textDocument/didOpen" and uri.endswith("/dirty.txt"):
            opened = True
            note({"event": "didOpen", "uri": uri, "text": params["textDocument"].get("text")})
        if method == "textDocument/didChange" and uri.endswith("/dirty.txt") and opened:
            note({"event": "didChange", "uri": uri})
            if not sent:
                sent = True
                edit = {
                    "label": "pi: write dirty.txt",
                    "edit": {
                        "changes": {
                            uri: [
                                {
                                    "range": {
                                        "start": {"line": 1, "character": 0},
                                        "end": {"line": 1, "character": 8},
                                    },
                                    "newText": "line 2, edited by the agent",
                                }
                            ]
                        }
                    },
                }
                request = {"jsonrpc": "2.0", "id": EDIT_ID, "method": "workspace/applyEdit", "params": edit}
                write_frame(to_client, json.dumps(request).encode(), client_lock)
        if message.get("id") == EDIT_ID and "method" not in message:
            note({"event": "applied", "result": message.get("result"), "error": message.get("error")})
            continue  # the answer to the proxy's own request: not the bridge's
        bridge.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        bridge.stdin.flush()
    bridge.stdin.close()
    return bridge.wait()


if __name__ == "__main__":
    sys.exit(main())
