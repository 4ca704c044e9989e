"""What handing pi's file operations to the bridge costs (issue #34): a read and a write through
the bridge's policy against pi's own tools, side by side.

    python -m bench.file_ops [--samples N]

Two bridges in one invocation, on one scripted model, each with one `full` conversation. One
runs pi as usual: the extension's read and write hand every file operation to the bridge
(bridge/policy/file_ops.py). The other passes `PI_BRIDGE_FS_LOCAL=1` to its pi: the extension
keeps pi's own operations (the baseline). Each turn is the `script` scenario making ten reads (or
ten writes) of a small file of the workspace; a sample is one call, `tool.call` read →
`tool.completed` read on this client (the bridge's mapping is the same on both sides). Turns
alternate between the bridges. The added latency is the median with the bridge less the median
without.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from bench.common import base_env, bridge_argv, median, ms, side_by_side_main
from bench.lsp import LspClient
from bench.model import ModelEnv, scripted_model
from bench.realpi import run_params
from bridge.policy.rule_store import STATE_DIR_ENV

PER_TURN = 10
TARGET_MS = 2.0
FILE = "bench-file.txt"
TEXT = "a line of text\n" * 40


def _calls(op: str) -> str:
    call = ["read", {"path": FILE}] if op == "read" else ["write", {"path": FILE, "content": TEXT}]
    return json.dumps([call] * PER_TURN)


def _turn(
    client: LspClient, model: ModelEnv, run_id: str, session: str | None, op: str
) -> tuple[str, list[float]]:
    """One turn of PER_TURN calls: the session, and each call's tool.call → tool.completed."""
    start = len(client.messages)
    params = {**run_params(model, "script", run_id, session), "prompt": _calls(op)}
    msg_id, _ = client.request("pi/run", params)
    _, answer = client.wait_response(msg_id, 60)
    result = answer.get("result") or {}
    if result.get("status") != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {answer}")
    began: dict[str, float] = {}
    took: list[float] = []
    for at, message in client.messages[start:]:
        kind, content = message["params"]["type"], message["params"].get("content") or {}
        if kind == "tool.call":
            began[content["toolCallId"]] = at
        elif kind == "tool.completed":
            took.append(at - began[content["toolCallId"]])
        elif kind == "tool.failed":
            raise RuntimeError(f"run {run_id}: a {op} failed: {content}")
    if len(took) != PER_TURN:
        raise RuntimeError(f"run {run_id}: {len(took)} calls completed, not {PER_TURN}")
    return str(result["sessionId"]), took


def run(samples: int) -> dict[str, Any]:
    """Both ops, each with and without the bridge's operations (ms)."""
    turns = max(1, samples // PER_TURN)
    times: dict[str, dict[str, list[float]]] = {op: {"with": [], "without": []} for op in ("read", "write")}
    with scripted_model() as model, tempfile.TemporaryDirectory(prefix="pi-bench-fs-") as state:
        (model.workdir / FILE).write_text(TEXT)
        clients: dict[str, LspClient] = {}
        sessions: dict[str, str | None] = {"with": None, "without": None}
        try:
            for name in ("with", "without"):
                env = {**model.pi_env(), **({"PI_BRIDGE_FS_LOCAL": "1"} if name == "without" else {})}
                client = LspClient(bridge_argv(), env={**base_env(), STATE_DIR_ENV: f"{state}/{name}"})
                client.initialize(
                    {"piCommand": ["pi"], "env": env, "checkpoints": False, "warmPool": False},
                    root_uri=model.workdir.as_uri(),
                )
                clients[name] = client
            for name, client in clients.items():  # unmeasured: pi starts, the file is cached
                sessions[name], _ = _turn(client, model, f"fs-warm-{name}", None, "read")
            for trial in range(turns):
                for op in ("read", "write"):
                    for name in ("with", "without") if trial % 2 == 0 else ("without", "with"):
                        run_id = f"fs-{trial}-{op}-{name}"
                        sessions[name], took = _turn(clients[name], model, run_id, sessions[name], op)
                        times[op][name].extend(took)
        finally:
            for client in clients.values():
                client.close()
    out: dict[str, Any] = {}
    for op, figures in times.items():
        with_ms, without_ms = ms(median(figures["with"])), ms(median(figures["without"]))
        out[op] = {
            "samples": len(figures["with"]),
            "with_ms": with_ms,
            "without_ms": without_ms,
            "added_ms": with_ms - without_ms,
            "raw_with_ms": [round(ms(t), 2) for t in figures["with"]],
            "raw_without_ms": [round(ms(t), 2) for t in figures["without"]],
        }
    return out


def summary(res: dict[str, Any]) -> list[str]:
    """One line per op."""
    lines = []
    for op, f in res.items():
        verdict = "within" if f["added_ms"] <= TARGET_MS else "over"
        lines.append(
            f"file ops, pi's {op} (tool.call → tool.completed): through the bridge {f['with_ms']:.2f} ms, "
            f"pi's own {f['without_ms']:.2f} ms: {f['added_ms']:+.2f} ms ({verdict} the {TARGET_MS:g} ms "
            f"target, median of {f['samples']})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    count = ("samples", 100, "calls of each op on each side")
    return side_by_side_main(argv, "python -m bench.file_ops", __doc__ or "", count, run, summary)


if __name__ == "__main__":
    raise SystemExit(main())
