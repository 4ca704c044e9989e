"""The one client-side JSON-RPC peer over a child process's stdio, with LSP or NDJSON framing."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from bridge.fronts.lsp.writer import frame

#: How much one read takes from the child's stdout at most.
CHUNK = 1 << 20


class Framing(Protocol):
    """How bodies are wrapped on the way out and cut out of the stream on the way in."""

    def encode(self, body: bytes) -> bytes:
        """One body as it goes on the wire."""
        ...

    def split(self, buf: bytes) -> tuple[list[bytes], bytes]:
        """The complete bodies at the head of `buf` and what is left of it (an unfinished frame)."""
        ...

    def finish(self, rest: bytes) -> list[bytes]:
        """The bodies in what was left when the output ended (ValueError if that is broken)."""
        ...

    def wanted(self, rest: bytes) -> int:
        """How long the buffer that `rest` starts must grow before a body can complete in it."""
        ...

    def may_end_body(self, chunk: bytes) -> bool:
        """Whether a body can end in `chunk` (else it is kept, not split again)."""
        ...


class LspFraming:
    """LSP base-protocol framing: `Content-Length` headers, a blank line, the body."""

    def encode(self, body: bytes) -> bytes:
        """One body with its header."""
        return frame(body)

    def split(self, buf: bytes) -> tuple[list[bytes], bytes]:
        """Cut complete frames; a header line without a colon or a frame without Content-Length
        raises ValueError (the peer broke the framing)."""
        bodies: list[bytes] = []
        pos = 0
        while True:
            head_end = buf.find(b"\r\n\r\n", pos)
            if head_end < 0:
                _check_unfinished_header(buf, pos)
                break
            length = _content_length(buf[pos:head_end])
            body_start = head_end + 4
            if body_start + length > len(buf):
                break
            bodies.append(buf[body_start : body_start + length])
            pos = body_start + length
        return bodies, buf[pos:]

    def finish(self, rest: bytes) -> list[bytes]:
        """Nothing may be left over: output ending inside a frame is broken."""
        if rest:
            raise ValueError("the output ended inside a frame")
        return []

    def wanted(self, rest: bytes) -> int:
        """The whole frame's length once its header is in; else one byte more."""
        head_end = rest.find(b"\r\n\r\n")
        if head_end < 0:
            return len(rest) + 1
        try:
            return head_end + 4 + _content_length(rest[:head_end])
        except ValueError:
            return len(rest) + 1  # `split` says what is wrong with it

    def may_end_body(self, chunk: bytes) -> bool:
        """Any chunk may (a body's end is known from its header, not from its bytes)."""
        return True


def _content_length(head: bytes) -> int:
    length = -1
    for line in head.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"not a frame header line: {line[:200]!r}")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length < 0:
        raise ValueError("a frame without Content-Length")
    return length


def _check_unfinished_header(buf: bytes, pos: int) -> None:
    """Fail early on a finished first line of a header that is not a header line."""
    line_end = buf.find(b"\n", pos)
    if line_end >= 0 and b":" not in buf[pos:line_end]:
        raise ValueError(f"not a frame header line: {buf[pos : line_end + 1][:200]!r}")


class NdjsonFraming:
    """Newline-delimited JSON (ACP's stdio framing): one body a line (blank lines included: what
    a line holds is the reader's business)."""

    def encode(self, body: bytes) -> bytes:
        """One body and its newline."""
        return body + b"\n"

    def split(self, buf: bytes) -> tuple[list[bytes], bytes]:
        """Cut complete lines (without their newline)."""
        *lines, rest = buf.split(b"\n")
        return lines, rest

    def finish(self, rest: bytes) -> list[bytes]:
        """A last line without its newline is a line."""
        return [rest] if rest else []

    def wanted(self, rest: bytes) -> int:
        """One byte more (a line's length is known only at its newline)."""
        return len(rest) + 1

    def may_end_body(self, chunk: bytes) -> bool:
        """Only a chunk with a newline."""
        return b"\n" in chunk


LSP = LspFraming()
NDJSON = NdjsonFraming()


def _json_dumps(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


class StdioPeer:
    """A child process spoken to as JSON-RPC 2.0 over its stdin and stdout.

    Sending is thread-safe and unbuffered (`bufsize=0`). Reading is either blocking (`read`) or
    done by one reader thread (`start_reader`) that hands every chunk's bodies to `received`;
    `pause_reading` parks that thread before its next read, so the child's output backs up in
    the pipe as it would behind a client that stopped reading.
    """

    #: How a payload becomes a body (subclasses on a hot path pass orjson.dumps).
    dumps: Callable[[Any], bytes] = staticmethod(_json_dumps)
    #: Whether a request or notification without params carries `"params": null` (else none).
    null_params = True

    def __init__(
        self,
        argv: list[str],
        *,
        framing: Framing = LSP,
        env: dict[str, str] | None = None,
        cwd: Any = None,
        stderr: Any = None,
    ) -> None:
        self.framing = framing
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd, bufsize=0
        )
        self.eof = False
        self.reader_error: BaseException | None = None
        self.eof_read = False
        #: When the last read returned (time.perf_counter()): the arrival time of its bodies.
        self.read_at = 0.0
        # What the last split left (an unfinished frame), as the chunks read since, their total
        # size, and the size at which a body can complete: a frame many reads long is joined and
        # split once, not once a read (which is quadratic in its size).
        self._parts: list[bytes] = []
        self._size = 0
        self._wanted = 1
        self._pending: collections.deque[bytes] = collections.deque()
        self._write_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._next_id = 0
        self._reading = threading.Event()
        self._reading.set()
        # Set while the reader thread waits for resume_reading: a pause takes effect only after
        # the chunk being read when it came.
        self.reader_parked = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The child's pid."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the child is still running."""
        return self.proc.poll() is None

    # ------------------------------------------------------------------ writing

    def send_bytes(self, data: bytes) -> float:
        """Write raw bytes to the child's stdin; return the time they were written."""
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            sent = time.perf_counter()
            view = memoryview(data)
            while view:
                view = view[stdin.write(view) or 0 :]
        return sent

    def send(self, payload: Any) -> float:
        """Write one framed message; return the time it was written."""
        return self.send_bytes(self.framing.encode(self.dumps(payload)))

    def new_id(self) -> int:
        """A fresh request id."""
        with self._id_lock:
            self._next_id += 1
            return self._next_id

    def envelope(self, method: str, params: Any, msg_id: Any = None) -> dict[str, Any]:
        """A request (with `msg_id`) or notification envelope."""
        payload: dict[str, Any] = {"jsonrpc": "2.0"}
        if msg_id is not None:
            payload["id"] = msg_id
        payload["method"] = method
        if params is not None or self.null_params:
            payload["params"] = params
        return payload

    def send_request(self, method: str, params: Any = None, msg_id: Any = None) -> tuple[Any, float]:
        """Send a request (a fresh id unless given); return (id, time sent)."""
        if msg_id is None:
            msg_id = self.new_id()
        return msg_id, self.send(self.envelope(method, params, msg_id))

    def notify(self, method: str, params: Any = None) -> float:
        """Send a notification; return the time sent."""
        return self.send(self.envelope(method, params))

    def close_stdin(self) -> None:
        """End the child's input."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.close()
        except BrokenPipeError:
            pass

    def wait_exit(self, timeout: float) -> int | None:
        """Wait for the child to exit; on timeout kill it by its pid and return None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    # ------------------------------------------------------------------ reading

    def read_chunk(self) -> list[bytes] | None:
        """One read of the child's stdout, as the bodies it completes; None at end of output.
        Output ending inside a frame, or broken framing, raises ValueError."""
        stdout = self.proc.stdout
        assert stdout is not None
        if self.eof_read:
            return None
        chunk = os.read(stdout.fileno(), CHUNK)
        self.read_at = time.perf_counter()
        if not chunk:
            self.eof_read = True
            rest = b"".join(self._parts)
            self._parts, self._size = [], 0
            return self.framing.finish(rest) or None
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size < self._wanted or not self.framing.may_end_body(chunk):
            return []
        buf = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        bodies, rest = self.framing.split(buf)
        self._parts = [rest] if rest else []
        self._size = len(rest)
        self._wanted = self.framing.wanted(rest)
        return bodies

    def read_body(self) -> bytes | None:
        """The next body (blocking), or None at end of output."""
        while not self._pending:
            bodies = self.read_chunk()
            if bodies is None:
                return None
            self._pending.extend(bodies)
        return self._pending.popleft()

    def read(self) -> dict[str, Any] | None:
        """The next message (blocking), or None at end of output."""
        body = self.read_body()
        if body is None:
            return None
        message: dict[str, Any] = json.loads(body)
        return message

    def start_reader(self, name: str = "stdio-peer-reader") -> None:
        """Read on one daemon thread from now on, handing bodies to `received`."""
        self._reader = threading.Thread(target=self._read_loop, name=name, daemon=True)
        self._reader.start()

    def join_reader(self, timeout: float) -> None:
        """Wait for the reader thread to finish (after end of output)."""
        if self._reader is not None:
            self._reader.join(timeout)

    def pause_reading(self) -> None:
        """Stop reading the child's stdout (a client that stopped reading)."""
        self._reading.clear()

    def resume_reading(self) -> None:
        """Read again."""
        self._reading.set()

    def received(self, now: float, bodies: list[bytes]) -> None:
        """The bodies one chunk completed, read at `now` (time.perf_counter()); override."""

    def ended(self) -> None:
        """The output ended (or broke: see `reader_error`); override, calling this first."""
        self.eof = True

    def _read_loop(self) -> None:
        try:
            while True:
                if not self._reading.is_set():
                    self.reader_parked.set()
                    self._reading.wait()
                    self.reader_parked.clear()
                bodies = self.read_chunk()
                if bodies is None:
                    break
                if bodies:
                    self.received(self.read_at, bodies)
        except BaseException as exc:  # surfaced by the owner's waits: broken output from the child
            self.reader_error = exc
        finally:
            self.ended()


class StdioClient(StdioPeer):
    """The demo's client: blocking reads, each request answered in turn."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        super().__init__(argv, env=env)

    def request(self, method: str, params: Any) -> int:
        """Send a request; return its id."""
        msg_id: int = self.send_request(method, params)[0]
        return msg_id

    def wait_for(
        self, msg_id: int, on_message: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
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
