"""The waits the JSON-RPC clients share: responses by id, and timestamped streams."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Inbox:
    """Waits shared by the benchmarks' JSON-RPC clients (LSP-framed and ACP): a reader thread fills
    `responses` (by id) and timestamped streams under `_cond`, and sets `eof` at the end."""

    peer = "the server"
    responses: dict[Any, tuple[float, dict[str, Any]]]
    eof: bool
    _cond: threading.Condition

    def wait_response(self, msg_id: Any, timeout: float = 60.0) -> tuple[float, dict[str, Any]]:
        """Wait for the response to msg_id; return (arrival time, message)."""
        with self._cond:
            if not self._cond.wait_for(lambda: msg_id in self.responses or self.eof, timeout):
                raise TimeoutError(f"no response from {self.peer} to {msg_id} within {timeout} s")
            if msg_id not in self.responses:
                raise EOFError(f"{self.peer} closed its output before answering {msg_id}")
            return self.responses[msg_id]

    def wait_indexed(
        self,
        items: list[tuple[float, dict[str, Any]]],
        predicate: Callable[[dict[str, Any]], bool],
        start: int,
        timeout: float,
    ) -> tuple[int, float, dict[str, Any]]:
        """Wait for an item of `items` (index >= start) matching predicate; (index, time, item)."""
        found: list[tuple[int, float, dict[str, Any]]] = []

        def ready() -> bool:
            for index in range(start, len(items)):
                arrived, item = items[index]
                if predicate(item):
                    found.append((index, arrived, item))
                    return True
            return self.eof

        with self._cond:
            if not self._cond.wait_for(ready, timeout) or not found:
                raise TimeoutError(f"no matching message from {self.peer} within {timeout} s")
            return found[0]
