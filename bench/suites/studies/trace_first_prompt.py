"""Where the first prompt's time goes inside the bridge: its own spans, named, per trial.

python -m bench trace_first_prompt [--trials N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.clients.lsp import LspClient
from bench.common import base_env, bridge_argv, median
from bench.model import ModelEnv, scripted_model
from bench.suites.studies.conversation import (
    FIRST_PROMPT_PAUSE,
    initialize_like_an_editor,
    timed_prompt,
    wait_spare,
)

MARKS = (
    "client.in",
    "run.request",
    "run.drive",
    "run.trusted",
    "run.leased",
    "run.slot",
    "engine.prompt",
    "pi.stdin",
    "pi.out",
    "client.out",
)
BRIDGE_SPANS = {
    "client.in → run.request": "read and parse the frame, dispatch",
    "run.request → run.drive": "start the run: options, agent choice, the run's task",
    "run.drive → run.trusted": "sandbox check, session id, project trust",
    "run.trusted → run.leased": "lease the conversation (open it on the spare pi)",
    "run.leased → run.slot": "a concurrency slot",
    "run.slot → engine.prompt": "checkpoint hook, engine set-up",
    "engine.prompt → pi.stdin": "encode and write the prompt",
    "pi.out → client.out": "map pi's first event and write the frame",
}


def _spans(marks: list[tuple[str, int]], since: int) -> dict[str, float]:
    """The first prompt's spans (ms), from the ring's marks after `since` (ns): the marks up to
    pi.stdin in order, then the first frame out after it, and pi's last output before that frame
    (pi's earlier lines, its acceptance of the prompt, lead to no frame)."""
    at: dict[str, int] = {}
    order = MARKS[1:8]
    step = 0
    for name, ns in (m for m in marks if m[1] >= since):
        if name == "client.in" and "run.request" not in at:
            at["client.in"] = ns  # the last read before the run starts
        elif step < len(order) and name == order[step]:
            at[name] = ns
            step += 1
        elif "pi.stdin" in at and name == "pi.out" and "client.out" not in at:
            at["pi.out"] = ns
        elif "pi.out" in at and name == "client.out" and "client.out" not in at:
            at["client.out"] = ns
    pairs = itertools.pairwise(MARKS)
    return {f"{a} → {b}": (at[b] - at[a]) / 1e6 for a, b in pairs if a in at and b in at}


def trial(model: ModelEnv) -> tuple[dict[str, float], float]:
    """One fresh bridge's first prompt: its spans, and the client's pi/run → first `assistant`."""
    with tempfile.TemporaryDirectory(prefix="pi-bench-trace-") as tmp:
        path = Path(tmp) / "trace.json"
        env = {**base_env(), "PI_BRIDGE_TRACE": str(path)}
        client = LspClient(bridge_argv(), env=env, cwd=str(model.workdir))
        try:
            initialize_like_an_editor(client, model, "rpc")
            wait_spare(client)
            time.sleep(FIRST_PROMPT_PAUSE)
            since = time.monotonic_ns()
            first, _, _ = timed_prompt(client, model, "t-1", "text", None)
        finally:
            client.close()
        marks = [(str(n), int(t)) for n, t in json.loads(path.read_text())]
    return _spans(marks, since), first * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench trace_first_prompt", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    runs: list[dict[str, float]] = []
    wall: list[float] = []
    with scripted_model() as model:
        for _ in range(args.trials):
            spans, first = trial(model)
            runs.append(spans)
            wall.append(first)
    names = [f"{a} → {b}" for a, b in itertools.pairwise(MARKS)]
    result: dict[str, Any] = {"trials": args.trials, "client_first_ms": median(wall), "spans_ms": {}}
    for name in names:
        values = [r[name] for r in runs if name in r]
        if values:
            result["spans_ms"][name] = median(values)
    own = sum(v for k, v in result["spans_ms"].items() if k != "pi.stdin → pi.out")
    result["bridge_own_ms"] = own
    print(f"first prompt, pi/run sent → first assistant (client): {result['client_first_ms']:.1f} ms")
    for name, value in result["spans_ms"].items():
        what = BRIDGE_SPANS.get(name, "pi and the model (not the bridge)")
        print(f"  {name:28} {value:8.2f} ms  {what}")
    print(f"  the bridge's own share: {own:.2f} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    raise SystemExit(main())
