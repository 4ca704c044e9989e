"""Start a bridge under test through the worker's fork server: `python -I -S forked_bridge.py ARGS`
behaves as `python -m bridge ARGS` (stdio, exit status, the signals a test sends it).

Standard library only, so that this process starts in a few milliseconds. It hands its stdio to
the fork server (tests/support/forkserver.py), forwards the signals it gets to the bridge, and ends
as the bridge ended. Without a fork server in its environment it becomes the bridge by exec.
"""

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "PI_BRIDGE_TEST_FORKSERVER"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _exec_bridge() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "bridge", *sys.argv[1:]])


def _read_message(conn: socket.socket, buffer: bytearray) -> dict:
    while b"\n" not in buffer:
        data = conn.recv(4096)
        if not data:
            raise ConnectionError("the fork server hung up")
        buffer += data
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


def main() -> None:
    path = os.environ.get(SOCKET_ENV)
    if not path:
        _exec_bridge()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        _exec_bridge()
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    body = json.dumps({"argv": sys.argv[1:], "env": env, "cwd": os.getcwd()}).encode()
    payload = struct.pack("!I", len(body)) + body
    socket.send_fds(conn, [payload[:4096]], [0, 1, 2])
    if len(payload) > 4096:
        conn.sendall(payload[4096:])
    buffer = bytearray()
    pid = _read_message(conn, buffer)["pid"]
    # The bridge alone holds the client's pipes now: its exit is their end, as if it were us.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for signum in FORWARDED:
        signal.signal(signum, lambda sig, _frame: os.kill(pid, sig))
    try:
        status = _read_message(conn, buffer)["status"]
    except (ConnectionError, ValueError):
        sys.exit(1)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.exit(os.waitstatus_to_exitcode(status))


main()
