"""A chatty tool replayed through the bridge: many cumulative tool_execution_update lines, then
the tool's output repeated in its result, turn_end and agent_end (as pi prints them)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import orjson

from bench import agents as stand_ins
from bench import procs
from bench.clients.lsp import LspClient
from bench.common import ROOT, base_env, bridge_argv


def write_stream(path: Path, updates: int) -> int:
    """Write the stream; return the tool output's final length."""
    out: list[bytes] = []
    add = out.append
    add(orjson.dumps({"type": "session", "version": 3, "id": "chatty", "cwd": "/"}))
    add(orjson.dumps({"type": "agent_start"}))
    add(orjson.dumps({"type": "tool_execution_start", "toolCallId": "c1", "toolName": "bash", "args": {}}))
    text = ""
    for index in range(updates):
        text += f"line {index:06d} of a chatty build log\n"
        partial = {"content": [{"type": "text", "text": text}]}
        add(orjson.dumps({"type": "tool_execution_update", "toolCallId": "c1", "toolName": "bash",
                          "partialResult": partial}))  # fmt: skip
    result = {"content": [{"type": "text", "text": text}]}
    end = {"type": "tool_execution_end", "toolCallId": "c1", "toolName": "bash", "result": result}
    add(orjson.dumps(end))
    tool_message = {"role": "toolResult", "toolCallId": "c1", "content": result["content"]}
    add(orjson.dumps({"type": "message_start", "message": tool_message}))
    add(orjson.dumps({"type": "message_end", "message": tool_message}))
    add(orjson.dumps({"type": "turn_end", "message": {"role": "assistant"}, "toolResults": [tool_message]}))
    add(orjson.dumps({"type": "agent_end", "messages": [tool_message] * 4}))
    path.write_bytes(b"\n".join(out) + b"\n")
    return len(text)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench chatty_tool")
    parser.add_argument("--updates", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pi-bridge-chatty-") as tmp:
        stream = Path(tmp) / "chatty.jsonl"
        length = write_stream(stream, args.updates)
        argv = stand_ins.replay(stream)
        client = LspClient(bridge_argv(), env=base_env(), cwd=str(ROOT), keep_messages=False)
        try:
            client.initialize({"piCommand": argv, "warmPool": False, "engine": "json"})
            cpu0 = procs.cpu_seconds(client.pid)
            msg_id, sent = client.request("pi/run", {"prompt": "build", "cwd": tmp})
            answered, answer = client.wait_response(msg_id, timeout=600)
            cpu1 = procs.cpu_seconds(client.pid)
        finally:
            client.close()
    status = (answer.get("result") or {}).get("status")
    print(
        f"updates={args.updates} stream={stream_size(length, args.updates)} status={status} "
        f"wall={answered - sent:.3f}s cpu={cpu1 - cpu0:.3f}s frames={client.notifications}"
    )
    return 0


def stream_size(length: int, updates: int) -> str:
    return f"~{length * updates // 2 // 2**20} MB of updates, final output {length} B"


if __name__ == "__main__":
    raise SystemExit(main())
