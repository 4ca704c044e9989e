"""What checkpoints cost (issue #25): per turn on a workspace of 10,000 files, and to the first delta.

    python -m bench.checkpoints [--files N] [--turns N] [--trials N]

1. **Per turn.** A generated workspace of N small files in 100 folders, and the shadow
   repository the bridge keeps for it (bridge/checkpoints/shadow_git.py). The first snapshot (every file
   hashed once) is timed apart. Then each turn changes 5 files and takes what the bridge takes for
   a prompt: the snapshot before it, the snapshot after it, and the list of files it changed. The
   p50 and p95 of a turn's whole cost, and of the snapshot before alone.
2. **The first delta.** Two bridges (LSP), one with `checkpoints: false`, each with a live
   conversation in a copy of that workspace; the same `text` prompt alternates between them,
   pi/run sent → first `assistant` message. The snapshot before a prompt is taken while the prompt
   goes out, so the two medians should differ by no more than their noise (the spread of the
   off bridge's own trials, its p75 less its p25).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import base_env, bridge_argv, median, ms
from bench.lsp import LspClient
from bench.model import ModelEnv, scripted_model
from bench.realpi import run_params
from bridge.checkpoints.shadow_git import ShadowRepo, find_git
from bridge.policy.rule_store import STATE_DIR_ENV


def make_workspace(root: Path, files: int) -> Path:
    """`files` small text files in 100 folders, under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        folder = root / f"pkg{i % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"VALUE = {i}\n" * 8)
    return root


def _cpu() -> float:
    """CPU seconds of this process and its ended children (git): a turn's cost on an idle
    machine, which a shared one's wall clock overstates."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def turn_cost(workspace: Path, turns: int) -> dict[str, Any]:
    """Figure 1: the first snapshot, and per turn the bridge's whole work (ms)."""
    git = find_git()
    if git is None:
        raise RuntimeError("git is not installed")
    with tempfile.TemporaryDirectory(prefix="pi-bench-shadow-") as state:
        repo = ShadowRepo(git, Path(state) / "git", workspace)
        started = time.perf_counter()
        repo.snapshot("first", "first")
        first = time.perf_counter() - started
        whole: list[float] = []
        before_only: list[float] = []
        cpu: list[float] = []
        for turn in range(turns):
            cpu_started = _cpu()
            started = time.perf_counter()
            before = repo.snapshot(f"t{turn}-before", "before")
            taken = time.perf_counter()
            for k in range(5):
                path = workspace / f"pkg{(turn * 5 + k) % 100:02d}" / f"mod{(turn * 5 + k) % 100}.py"
                path.write_text(f"VALUE = {turn}\n")
            changed_at = time.perf_counter()
            after = repo.snapshot(f"t{turn}-after", "after")
            repo.changed(before.commit, after.commit)
            done = time.perf_counter()
            cpu.append(_cpu() - cpu_started)
            whole.append((taken - started) + (done - changed_at))
            before_only.append(taken - started)
    return {
        "files": sum(1 for _ in workspace.rglob("*.py")),
        "turns": turns,
        "first_snapshot_ms": ms(first),
        "turn_p50_ms": ms(median(whole)),
        "turn_p95_ms": ms(_percentile(whole, 0.95)),
        "before_p50_ms": ms(median(before_only)),
        "before_p95_ms": ms(_percentile(before_only, 0.95)),
        "turn_cpu_p50_ms": ms(median(cpu)),
    }


def _first_tool(client: LspClient, model: ModelEnv, cwd: Path, run_id: str, session: str) -> float:
    """A `tool` turn (bash `echo hi`): its tool.call read → its first tool.update read, the segment
    that holds the wait for the snapshot before the prompt."""
    params = {**run_params(model, "tool", run_id, session), "cwd": str(cwd)}
    start = len(client.messages)
    msg_id, _ = client.request("pi/run", params)
    client.wait_response(msg_id, 60)
    first: dict[str, float] = {}
    for at, message in client.messages[start:]:
        if message["params"]["runId"] == run_id:
            first.setdefault(message["params"]["type"], at)
    return first["tool.update"] - first["tool.call"]


def _first_delta(client: LspClient, model: ModelEnv, cwd: Path, run_id: str, session: str) -> float:
    params = {**run_params(model, "text", run_id, session), "cwd": str(cwd)}
    start = len(client.messages)
    msg_id, sent = client.request("pi/run", params)
    _, at, _ = client.wait_message(
        lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == "assistant", start, 60
    )
    client.wait_response(msg_id, 60)
    return at - sent


def first_delta(model: ModelEnv, workspace: Path, trials: int) -> dict[str, Any]:
    """Figure 2: pi/run sent → first assistant message, checkpoints on against off (ms)."""
    clients: dict[str, tuple[LspClient, Path, str]] = {}
    times: dict[str, list[float]] = {"on": [], "off": []}
    tools: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="pi-bench-cp-") as tmp:
        try:
            for name in ("on", "off"):
                cwd = Path(tmp) / name
                shutil.copytree(workspace, cwd)
                env = {**base_env(), STATE_DIR_ENV: str(Path(tmp) / f"state-{name}")}
                client = LspClient(bridge_argv(), env=env, cwd=str(cwd))
                client.initialize(
                    {"piCommand": ["pi"], "env": model.pi_env(), "checkpoints": name == "on"},
                    root_uri=cwd.as_uri(),
                )
                msg_id, _ = client.request(
                    "pi/run", {**run_params(model, "text", f"{name}-0"), "cwd": str(cwd)}
                )
                session = str((client.wait_response(msg_id, 120)[1].get("result") or {})["sessionId"])
                clients[name] = (client, cwd, session)
            for name, (client, cwd, session) in clients.items():  # unmeasured: warm both
                _first_delta(client, model, cwd, f"{name}-warm", session)
            for trial in range(trials):
                order = ("on", "off") if trial % 2 == 0 else ("off", "on")
                for name in order:
                    client, cwd, session = clients[name]
                    times[name].append(_first_delta(client, model, cwd, f"{name}-{trial}", session))
                    tools[name].append(_first_tool(client, model, cwd, f"{name}-t{trial}", session))
        finally:
            for client, _, _ in clients.values():
                client.close()
    off = times["off"]
    quartiles = statistics.quantiles(off, n=4) if len(off) >= 4 else [min(off), 0.0, max(off)]
    return {
        "trials": trials,
        "on_ms": ms(median(times["on"])),
        "off_ms": ms(median(off)),
        "added_ms": ms(median(times["on"])) - ms(median(off)),
        "noise_ms": ms(quartiles[2] - quartiles[0]),
        "tool_on_ms": ms(median(tools["on"])),
        "tool_off_ms": ms(median(tools["off"])),
        "raw_on_ms": [round(ms(t), 2) for t in times["on"]],
        "raw_off_ms": [round(ms(t), 2) for t in off],
    }


def run(files: int, turns: int, trials: int) -> dict[str, Any]:
    """Both figures in one invocation, on one generated workspace."""
    with tempfile.TemporaryDirectory(prefix="pi-bench-ws-") as tmp:
        workspace = make_workspace(Path(tmp) / "ws", files)
        with scripted_model() as model:
            delta = first_delta(model, workspace, trials)
        cost = turn_cost(workspace, turns)
    return {"turn": cost, "first_delta": delta}


def summary(res: dict[str, Any]) -> list[str]:
    """One line per figure."""
    cost, delta = res["turn"], res["first_delta"]
    return [
        f"checkpoints, {cost['files']:,} files: first snapshot {cost['first_snapshot_ms']:.0f} ms; per turn "
        f"p50 {cost['turn_p50_ms']:.1f} ms, p95 {cost['turn_p95_ms']:.1f} ms (the snapshot before: "
        f"p50 {cost['before_p50_ms']:.1f} ms, p95 {cost['before_p95_ms']:.1f} ms; {cost['turns']} turns; "
        f"CPU per turn p50 {cost['turn_cpu_p50_ms']:.1f} ms)",
        f"checkpoints, first delta: on {delta['on_ms']:.1f} ms, off {delta['off_ms']:.1f} ms: "
        f"{delta['added_ms']:+.1f} ms, noise (off's IQR) {delta['noise_ms']:.1f} ms "
        f"({delta['trials']} trials)",
        f"checkpoints, a turn's first tool (tool.call → first tool.update): on {delta['tool_on_ms']:.1f} ms, "
        f"off {delta['tool_off_ms']:.1f} ms: {delta['tool_on_ms'] - delta['tool_off_ms']:+.1f} ms",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.checkpoints", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="files in the generated workspace")
    parser.add_argument("--turns", type=int, default=30, help="turns of figure 1")
    parser.add_argument("--trials", type=int, default=20, help="alternating trials of figure 2")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    res = run(args.files, args.turns, args.trials)
    print("\n".join(summary(res)))
    print(json.dumps({k: {n: v for n, v in f.items() if not n.startswith("raw")} for k, f in res.items()}))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
