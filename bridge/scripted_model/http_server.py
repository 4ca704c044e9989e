"""The scripted model's HTTP server, on 127.0.0.1 only, so the real agents run offline (demo and
tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import pathlib
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Self

from bridge.scripted_model import gemini_api, responses_api
from bridge.scripted_model.formats import Frame, anthropic_frames, error_body, estimate_tokens, openai_frames
from bridge.scripted_model.reply import Api, ErrorReply, wire_json
from bridge.scripted_model.request_body import last_user_text_of, user_images_of, user_texts_of
from bridge.scripted_model.scenarios import SCENARIOS, build_reply

log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"

#: GET path that answers the recorded requests (see ScriptedModelServer.request_summaries).
REQUESTS_PATH: Final = "/_scripted/requests"


class _Disconnected(Exception):
    """The client went away or the server is stopping: abandon this response quietly."""


_QUIET_ERRORS: Final = (
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    TimeoutError,
)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 makes simultaneous connects wait for SYN retries (~1 s).
    request_queue_size = 256

    def __init__(self, owner: ScriptedModelServer, address: tuple[str, int]) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(): reverse DNS, which can stall.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, _QUIET_ERRORS) or self.owner.stopping:
            log.debug("connection from %s ended: %r", client_address, exc)
            return
        log.exception("error while serving %s", client_address)


def _api_of(path: str) -> Api | None:
    """The model API a POST path names (query and trailing slash removed), None for neither."""
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if gemini_api.gemini_call(path) is not None:
        return "gemini"
    return None


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModel/1.0"
    sys_version = ""

    # -- plumbing ---------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._track(self.connection, add=False)

    def handle(self) -> None:
        try:
            super().handle()
        except (_Disconnected, *_QUIET_ERRORS):
            self.close_connection = True
        except OSError:
            if not self.server.owner.stopping:
                raise
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> None:
        payload = wire_json(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        # Every answer closes its connection: no keep-alive races with client pools.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        self.close_connection = True

    def _client_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; True if the peer closed its side meanwhile."""
        try:
            # poll, not select: select() fails on descriptors above 1023.
            poller = select.poll()
            poller.register(self.connection, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(timeout * 1000):
                return False
            peeked = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True
        if peeked == b"":
            return True
        # The client sent more bytes (not expected mid-response); avoid a busy loop.
        time.sleep(timeout)
        return False

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``; raise _Disconnected as soon as the client or server goes."""
        owner = self.server.owner
        deadline = time.monotonic() + seconds
        while True:
            if owner.stopping:
                raise _Disconnected
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._client_gone(min(remaining, 0.05)):
                raise _Disconnected

    # -- requests ---------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == REQUESTS_PATH:
            self._send_json(200, {"requests": self.server.owner.request_summaries()})
            return
        self.server.owner._record(self.path, None, {})
        if path.endswith("/models"):
            models = sorted(SCENARIOS)
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in models]
            self._send_json(200, {"object": "list", "data": data})
            return
        self._send_json(
            404,
            {
                "error": {
                    "message": f"unknown path {self.path}",
                    "type": "invalid_request_error",
                }
            },
        )

    def do_POST(self) -> None:
        """A token count, a request to one of the model APIs, or an unknown path."""
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/messages/count_tokens"):
            self._count_tokens()
            return
        api = _api_of(path)
        if api is None:
            self._unknown_post()
            return
        body = self._json_object(api)
        if body is None:
            return
        if api == "gemini":
            model, method = gemini_api.gemini_call(path) or ("", "")
            shaped = gemini_api.chat_shape(model, body)
            if method == "countTokens":
                self.server.owner._record(self.path, None, {})
                self._send_json(200, {"totalTokens": estimate_tokens(shaped)})
                return
            self._answer(api, shaped, body, whole=method == "generateContent")
        elif api == "responses":
            self._answer(api, responses_api.chat_shape(body), body)
        else:
            self._answer(api, body, body)

    def _count_tokens(self) -> None:
        """Anthropic's token count: an estimate of the request's messages (any body is accepted)."""
        counted = self._read_body()
        try:
            request = json.loads(counted.decode("utf-8")) if counted else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            request = {}
        request = request if isinstance(request, dict) else {}
        self.server.owner._record(self.path, None, {})
        self._send_json(200, {"input_tokens": estimate_tokens(request)})

    def _unknown_post(self) -> None:
        """A POST to no model API: recorded, answered 404 in OpenAI's error format."""
        self._read_body()
        self.server.owner._record(self.path, None, {})
        bad = ErrorReply(404, f"unknown path {self.path}", "not_found")
        self._send_json(404, error_body("openai", bad))

    def _json_object(self, api: Api) -> dict[str, Any] | None:
        """The request body as a JSON object; None once a body that is not one is answered 400."""
        raw = self._read_body()
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            parsed = None
            problem = f"request body is not JSON: {exc}"
        else:
            problem = "request body must be a JSON object"
        if not isinstance(parsed, dict):
            self.server.owner._record(self.path, None, {})
            self._send_json(400, error_body(api, ErrorReply(400, problem, "bad_request")))
            return None
        return parsed

    def _answer(self, api: Api, body: dict[str, Any], raw: dict[str, Any], *, whole: bool = False) -> None:
        """Record the request and answer with its scenario's reply: an error, a hang or a stream
        (``whole``: the reply as one JSON answer, Gemini's ``generateContent``)."""
        owner = self.server.owner
        raw_model = body.get("model")
        model = raw_model if isinstance(raw_model, str) else ""
        flaky_attempt = owner._record(self.path, model, body, raw)
        reply = build_reply(model, body, flaky_attempt)
        if reply.error is not None:
            self._send_json(reply.error.status, error_body(api, reply.error), reply.error.headers)
            return
        if reply.hang > 0:
            self._pause(reply.hang)
            self.close_connection = True
            return
        delay = reply.delay * (owner.delay_scale if reply.scaled else 1.0)
        if whole:
            self._send_json(200, gemini_api.gemini_whole(model, reply, body))
            return
        if api == "openai":
            frames = openai_frames(model, reply, body, delay)
        elif api == "responses":
            frames = responses_api.responses_frames(model, reply, body, delay)
        elif api == "gemini":
            frames = gemini_api.gemini_frames(model, reply, body, delay)
        else:
            frames = anthropic_frames(model, reply, body, delay)
        self._stream(frames)

    def _stream(self, frames: Iterator[Frame]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        # No Content-Length: the body ends when the connection closes, which also lets
        # `drop` end the stream mid-way.
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        owner = self.server.owner
        pending = bytearray()
        for n, frame in enumerate(frames):
            if frame.pause > 0:
                if pending:
                    self.wfile.write(bytes(pending))
                    pending.clear()
                self._pause(frame.pause)
                self.wfile.write(frame.data)
                continue
            # Zero-delay frames are batched: a syscall per frame is slow for long-100000.
            pending += frame.data
            if len(pending) >= 65536:
                self.wfile.write(bytes(pending))
                pending.clear()
            if n % 256 == 0 and owner.stopping:
                raise _Disconnected
        if pending:
            self.wfile.write(bytes(pending))


class ScriptedModelServer:
    """Context manager; serves in a background thread on 127.0.0.1:port (0 = pick free).

    ``delay_scale`` multiplies the small per-piece delays (0 = as fast as possible); the
    ``slow`` and ``hang`` scenarios keep their real-time durations. ``record_path``: also append
    every recorded request to this file as one JSON line, for clients in another process (the
    editor tests) that cannot read :attr:`requests`.
    """

    def __init__(
        self,
        host: str = LOOPBACK,
        port: int = 0,
        *,
        delay_scale: float = 1.0,
        record_path: pathlib.Path | None = None,
    ) -> None:
        if host != LOOPBACK:
            raise ValueError(f"ScriptedModelServer only binds {LOOPBACK}, not {host!r}")
        if delay_scale < 0:
            raise ValueError("delay_scale must be >= 0")
        self._host = host
        self._port = port
        self.delay_scale = delay_scale
        self._record_path = record_path
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._counts: dict[str, int] = {}
        self._flaky = 0
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and start serving in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer(self, (self._host, self._port))
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model:{self._port}",
            daemon=True,
        )
        self._thread.start()
        log.info("scripted model server listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stop serving and cut in-flight streams; returns promptly."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            # Wakes handler threads blocked in select/recv/send so they end now.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the requested one until start())."""
        return self._port

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self._port}/v1"

    @property
    def stopping(self) -> bool:
        """True once stop() began."""
        return self._stopping.is_set()

    @property
    def open_connections(self) -> int:
        """Number of client connections open now (a cancelled stream drops out)."""
        with self._lock:
            return len(self._connections)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request received, oldest first: path, model, body (in the chat shape), raw (the
        body as sent), n (per model), t."""
        with self._lock:
            return list(self._requests)

    def request_summaries(self) -> list[dict[str, Any]]:
        """Every model request so far as {model, n, userTexts, userImages}: what GET /_scripted/requests
        answers, so a test in another process (an editor's) can see what reached the model."""
        return [
            {
                "model": r["model"],
                "n": r["n"],
                "userTexts": user_texts_of(r["body"]),
                "userImages": user_images_of(r["body"]),
            }
            for r in self.requests
            if r["model"]
        ]

    def last_user_text(self, model: str | None = None) -> str | None:
        """Text of the last user message of the latest request (of ``model`` if given)."""
        with self._lock:
            candidates = [r for r in self._requests if r["body"] and (model is None or r["model"] == model)]
        if not candidates:
            return None
        return last_user_text_of(candidates[-1]["body"])

    def reset(self) -> None:
        """Forget recorded requests and per-model counters, flaky counter included."""
        with self._lock:
            self._requests.clear()
            self._counts.clear()
            self._flaky = 0

    # -- called by handler threads ----------------------------------------------------

    def _record(
        self, path: str, model: str | None, body: dict[str, Any], raw: dict[str, Any] | None = None
    ) -> int:
        """Record one request (``body`` in the chat shape, ``raw`` as sent); returns the flaky
        attempt number (0 for other models)."""
        with self._lock:
            key = model or ""
            n = self._counts.get(key, 0) + 1
            self._counts[key] = n
            entry = {
                "path": path,
                "model": model,
                "body": body,
                "raw": body if raw is None else raw,
                "n": n,
                "t": time.time(),
            }
            self._requests.append(entry)
            if self._record_path is not None:
                with self._record_path.open("a", encoding="utf-8") as out:
                    # A request already in the chat shape is written once, not twice.
                    written = {k: v for k, v in entry.items() if k != "raw" or v is not body}
                    out.write(json.dumps(written, ensure_ascii=False) + "\n")
            if model == "flaky":
                self._flaky += 1
                return self._flaky
            return 0

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
