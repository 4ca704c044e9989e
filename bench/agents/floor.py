"""The throughput floor: the least a bridge can do with a pi stream, measured in the same run."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import orjson


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _frame(payload: object) -> bytes:
    body = orjson.dumps(payload)
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def main() -> int:
    argv = sys.argv[1:]
    sys.stdin.buffer.readline()
    cpu0 = time.process_time()
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(b"go")
    agent.stdin.close()
    fd = agent.stdout.fileno()
    rest = b""
    seq = 0
    text_len = 0
    lines_seen = 0
    while chunk := os.read(fd, 256 * 1024):
        lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = lines.pop()
        frames = []
        for line in lines:
            if not line:
                continue
            lines_seen += 1
            event = orjson.loads(line)
            if event.get("type") != "message_update":
                continue
            update = event.get("assistantMessageEvent")
            if isinstance(update, dict) and update.get("type") == "text_delta":
                seq += 1
                text_len += len(update["delta"])
                params = {
                    "runId": "floor",
                    "attempt": 1,
                    "seq": seq,
                    "type": "assistant",
                    "content": {"text": update["delta"]},
                }
                frames.append(_frame({"jsonrpc": "2.0", "method": "pi/message", "params": params}))
        if frames:
            _write_all(1, b"".join(frames))
    agent.wait()
    result = {
        "cpuSeconds": time.process_time() - cpu0,
        "maxRssKb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "deltas": seq,
        "textLength": text_len,
        "lines": lines_seen,
    }
    _write_all(1, _frame({"jsonrpc": "2.0", "id": 1, "result": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
