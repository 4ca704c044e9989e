"""What reading and writing through the editor costs (issue #38): pi's read and write over ACP,
through the client's `fs/read_text_file` / `fs/write_text_file` against the disk path.

    python -m bench.editor_fs [--samples N]

Two `pi-bridge acp` in one invocation, on one scripted model, each with one `full` session. The
client of one declares `fs` and answers from its buffers at once (as an editor does: the file's
text held in memory; a write replaces it there); the client of the other declares nothing, so
the bridge reads and writes the disk (bridge/policy/file_ops.py). Each turn is the `script`
scenario making ten reads (or ten writes) of a small file of the workspace; a sample is one
call, `tool_call` → its `tool_call_update` `completed` on this client (the bridge's mapping is
the same on both sides). Turns alternate between the bridges. The added latency is the median
through the editor less the median on the disk.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.acp import AcpClient, Message
from bench.common import PYTHON, base_env, median, ms
from bench.model import PROVIDER, ModelEnv, scripted_model
from bridge.policy.rule_store import STATE_DIR_ENV

PER_TURN = 10
TARGET_MS = 3.0
FILE = "bench-file.txt"
TEXT = "a line of text\n" * 40
BRIDGE_ACP = [PYTHON, "-m", "bridge", "acp", "--default-mode", "full"]
FS = {"fs": {"readTextFile": True, "writeTextFile": True}}


class EditorClient(AcpClient):
    """An ACP client that is an editor: it answers fs requests from its buffers."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str) -> None:
        self.buffers: dict[str, str] = {}
        self.fs_requests = 0
        super().__init__(argv, env=env, cwd=cwd)

    def _answer_agent_request(self, message: Message) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if method == "fs/read_text_file":
            self.fs_requests += 1
            path = str(params.get("path"))
            if path not in self.buffers:
                self.buffers[path] = Path(path).read_text()
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"content": self.buffers[path]}})
        elif method == "fs/write_text_file":
            self.fs_requests += 1
            self.buffers[str(params.get("path"))] = str(params.get("content"))
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        else:
            super()._answer_agent_request(message)


def _calls(op: str) -> str:
    call = ["read", {"path": FILE}] if op == "read" else ["write", {"path": FILE, "content": TEXT}]
    return json.dumps([call] * PER_TURN)


def _turn(client: AcpClient, session: str, op: str) -> list[float]:
    """One turn of PER_TURN calls: each call's tool_call → tool_call_update completed."""
    start = len(client.updates)
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": _calls(op)}]}
    _, _, answer = client.call("session/prompt", prompt, timeout=60)
    if (answer.get("result") or {}).get("stopReason") != "end_turn":
        raise RuntimeError(f"a {op} turn did not end: {answer}")
    began: dict[str, float] = {}
    took: list[float] = []
    for at, update in client.updates[start:]:
        kind, call_id = update.get("sessionUpdate"), update.get("toolCallId")
        if kind == "tool_call":
            began[call_id] = at
        elif kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
            if update["status"] == "failed":
                raise RuntimeError(f"a {op} failed: {update}")
            took.append(at - began[call_id])
    if len(took) != PER_TURN:
        raise RuntimeError(f"{len(took)} {op} calls completed, not {PER_TURN}")
    return took


def _open(model: ModelEnv, state: str, name: str) -> tuple[AcpClient, str]:
    env = {**base_env(), **model.pi_env(), STATE_DIR_ENV: f"{state}/{name}"}
    cls = EditorClient if name == "editor" else AcpClient
    client = cls(BRIDGE_ACP, env=env, cwd=str(model.workdir))
    capabilities = FS if name == "editor" else {}
    client.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
    _, _, new = client.call("session/new", {"cwd": str(model.workdir), "mcpServers": []})
    session = str(new["result"]["sessionId"])
    options = {"sessionId": session, "configId": "model", "value": f"{PROVIDER}/script"}
    client.call("session/set_config_option", options)
    return client, session


def run(samples: int) -> dict[str, Any]:
    """Both ops, through the editor and on the disk (ms)."""
    turns = max(1, samples // PER_TURN)
    times: dict[str, dict[str, list[float]]] = {op: {"editor": [], "disk": []} for op in ("read", "write")}
    with scripted_model() as model, tempfile.TemporaryDirectory(prefix="pi-bench-editor-fs-") as state:
        (model.workdir / FILE).write_text(TEXT)
        opened: dict[str, tuple[AcpClient, str]] = {}
        try:
            for name in ("editor", "disk"):
                opened[name] = _open(model, state, name)
            for client, session in opened.values():  # unmeasured: pi starts, the file is cached
                _turn(client, session, "read")
            for trial in range(turns):
                for op in ("read", "write"):
                    for name in ("editor", "disk") if trial % 2 == 0 else ("disk", "editor"):
                        times[op][name].extend(_turn(*opened[name], op))
            editor = opened["editor"][0]
            if not isinstance(editor, EditorClient) or editor.fs_requests == 0:
                raise RuntimeError("the editor was never asked: the bridge did not route through fs")
        finally:
            for client, _ in opened.values():
                client.close()
    out: dict[str, Any] = {}
    for op, figures in times.items():
        editor_ms, disk_ms = ms(median(figures["editor"])), ms(median(figures["disk"]))
        out[op] = {
            "samples": len(figures["editor"]),
            "editor_ms": editor_ms,
            "disk_ms": disk_ms,
            "added_ms": editor_ms - disk_ms,
        }
    return out


def summary(res: dict[str, Any]) -> list[str]:
    """One line per op."""
    lines = []
    for op, f in res.items():
        verdict = "within" if abs(f["added_ms"]) <= TARGET_MS else "over"
        lines.append(
            f"editor fs, pi's {op} (tool_call → completed): through the editor {f['editor_ms']:.2f} ms, "
            f"the disk {f['disk_ms']:.2f} ms: {f['added_ms']:+.2f} ms ({verdict} the {TARGET_MS:g} ms "
            f"target, median of {f['samples']})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.editor_fs", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100, help="calls of each op on each side")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    res = run(args.samples)
    print("\n".join(summary(res)))
    print(json.dumps(res))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
