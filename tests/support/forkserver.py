"""A fork server for the bridges the tests start: one Python per test worker imports the bridge's
third-party libraries once, then forks a bridge for each launch.

Why: the suite starts a bridge for nearly every test, and each fresh interpreter spent most of its
start importing lsprotocol, pygls, pydantic and the ACP SDK's schema, the suite's largest CPU cost
after the agents. The bridge's own modules are imported here too: none reads its environment,
working directory or argv at import (tests/unit/test_import_reads_nothing.py), so the forked
child, its environment, argv and cwd set, runs `bridge` as `python -m bridge` does.

Protocol (a unix socket): the launcher (tests/support/forked_bridge.py) sends a length-prefixed
JSON request {argv, env, cwd} with its stdin, stdout and stderr as SCM_RIGHTS; the server forks,
answers {"pid": P}, and when the bridge exits answers {"status": wait status}. The launcher's pid
maps to its bridge's pid in a file of `pid_dir` (tests/support/env.py's `bridge_pid`).

Run: python -m tests.support.forkserver SOCKET PID_DIR (it prints "ready" once it serves; it ends
at the end of its stdin, leaving running bridges to their own end, as their real parent would).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

#: The third-party libraries the bridge imports at start (the LSP and ACP fronts both), then its
#: own modules.
PRELOAD = (
    "asyncio",
    "attrs",
    "cattrs",
    "lsprotocol.types",
    "pygls.lsp.server",
    "pygls.protocol",
    "pygls.server",
    "pydantic",
    "pydantic_core",
    "acp",
    "acp.schema",
    "anyio",
    "psutil",
    "orjson",
    "argparse",
    "ctypes",
    "shlex",
    # the shell parser of the approvals: it builds its grammar's tables anew at each import
    "bashlex",
    # the wire contract: pydantic models only (no environment read, no I/O at import)
    "bridge.contract",
    # the bridge's own modules, both fronts and what they import: none reads its environment,
    # working directory or argv at import (tests/unit/test_import_reads_nothing.py holds it)
    "bridge.cli",
    "bridge.fronts.lsp.server",
    "bridge.fronts.acp.serve",
    "bridge.fronts.acp.first_frame",
)
HEADER = struct.Struct("!I")
MAX_FDS = 3


def _preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # The contract's models defer their validators to first use; a bridge builds the ones its
    # prompts and cancels need while its agent boots (the ACP front: all of them). Built once
    # here, every forked bridge inherits them.
    contract = sys.modules.get("bridge.contract")
    if contract is not None:
        from pydantic import BaseModel

        for model in vars(contract).values():
            if (
                isinstance(model, type)
                and issubclass(model, BaseModel)
                and model.__module__ == contract.__name__
            ):
                model.model_rebuild()


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One launch request: its JSON and the launcher's three stdio fds."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, MAX_FDS)
    while len(data) < HEADER.size:
        more = conn.recv(65536)
        if not more:
            raise ConnectionError("the launcher hung up mid-request")
        data += more
    (size,) = HEADER.unpack_from(data)
    body = data[HEADER.size :]
    while len(body) < size:
        more = conn.recv(max(65536, size - len(body)))
        if not more:
            raise ConnectionError("the launcher hung up mid-request")
        body += more
    return json.loads(body), list(fds)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_bridge(request: dict[str, Any]) -> int:
    """What `python -m bridge ARGS` does, in this already-started interpreter; its exit code."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["-m", *request["argv"]]
    code = 0
    try:
        runpy.run_module("bridge", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    # The interpreter's own exit: non-daemon threads joined, atexit handlers run, streams flushed.
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code


def _child(request: dict[str, Any], fds: list[int], server_objects: list[Any]) -> None:
    """In the forked child: take the launcher's stdio, drop the server's fds, become the bridge."""
    for obj in server_objects:
        with contextlib.suppress(OSError):
            obj.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    code = _run_bridge(request)
    if code < 0:  # died of a signal, as an uncaught KeyboardInterrupt does
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return pid


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def serve(sock_path: str, pid_dir: Path) -> None:
    """Fork a bridge per request until stdin ends."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    #: pidfd -> (bridge pid, the launcher's connection, the pid file)
    children: dict[int, tuple[int, socket.socket, Path]] = {}
    print("ready", flush=True)
    while True:
        for key, _events in selector.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                try:
                    request, fds = _read_request(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                launcher = _peer_pid(conn)
                pid = os.fork()
                if pid == 0:
                    others = [c for _, c, _ in children.values()]
                    _child(request, fds, [listener, conn, selector, *others, *(_Fd(fd) for fd in children)])
                for fd in fds:
                    os.close(fd)
                pid_file = pid_dir / str(launcher)
                pid_file.write_text(str(pid))
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn, pid_file)
                selector.register(pidfd, selectors.EVENT_READ, "child")
                _send(conn, {"pid": pid})
            else:
                pidfd = key.fd
                pid, conn, pid_file = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                _send(conn, {"status": status})
                conn.close()
                with contextlib.suppress(OSError):
                    pid_file.unlink()


class _Fd:
    """A raw fd the forked child closes with the server's other objects."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


if __name__ == "__main__":
    _preload()
    serve(sys.argv[1], Path(sys.argv[2]))
