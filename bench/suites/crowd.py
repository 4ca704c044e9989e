"""Cancel on a crowded machine: thousands of idle processes, a cancel, and the bridge's event loop.

python -m bench crowd
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import agents as stand_ins
from bench.clients.lsp import LspClient
from bench.common import CACHE, PYTHON, ROOT, base_env, median, ms

# One scan of a run's processes, as the bridge does it, timed in a fresh process (whichever bridge
# code PYTHONPATH selects: the old `snapshot_tree` + `reap_orphans`, or the new `scan_contained`).
SCAN_COST = r"""
import asyncio, json, os, sys, time
from bridge.process import shutdown as process, spawn as spawning
async def main():
    child = await spawning.spawn(("sleep", "300"), os.getcwd(), {})
    times, reaps = [], []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        if hasattr(process, "scan_contained"):
            process.scan_contained(child, {})
        else:
            process.snapshot_tree(child)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        spawning.reap_orphans()
        reaps.append(time.perf_counter() - t)
    await process.shutdown_tree(child)
    spawning.forget(child)
    times.sort(); reaps.sort()
    print(json.dumps({"scan_s": times[len(times) // 2], "reap_s": reaps[len(reaps) // 2]}))
asyncio.run(main())
"""


@dataclass
class CancelTrial:
    """One cancel on the crowded machine."""

    latency: float
    receipt_ms: float
    stage: str
    containment: str
    pids: int
    survivors: int
    rtts: list[float]


@dataclass
class ModeResult:
    """Every figure of one bridge code and containment mode."""

    label: str
    cancel_median_ms: float
    cancel_max_ms: float
    receipt_median_ms: float
    rtt_during_median_ms: float
    rtt_during_max_ms: float
    rtt_idle_median_ms: float
    rtt_idle_max_ms: float
    round_trips_during: int
    scan_ms: float
    reap_ms: float
    containment: str
    survivors: int


def start_crowd(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` idle processes, ours to kill."""
    return [
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]


def stop_crowd(crowd: list[subprocess.Popen[bytes]]) -> None:
    """Kill the crowd by pid and collect every exit status."""
    for proc in crowd:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    for proc in crowd:
        proc.wait(10)


def _env(root: Path, containment: str | None) -> dict[str, str]:
    env = base_env()
    env["PYTHONPATH"] = str(root)
    if containment is not None:
        env["PI_BRIDGE_CONTAINMENT"] = containment
    return env


def round_trip(client: LspClient) -> float:
    """One pi/runs request, answered: seconds."""
    msg_id, sent = client.request("pi/runs", None)
    answered, _ = client.wait_response(msg_id, 60)
    return answered - sent


def idle_round_trips(client: LspClient, seconds: float) -> list[float]:
    """pi/runs back to back for `seconds` with nothing running (the idle reaper ticks meanwhile)."""
    rtts: list[float] = []
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        rtts.append(round_trip(client))
        time.sleep(0.005)
    return rtts


def cancel_trial(client: LspClient, run_id: str) -> CancelTrial:
    """Start a run, cancel it once its agent is up, and keep pi/runs going until it answers."""
    start = len(client.messages)
    run_msg, _ = client.request("pi/run", {"runId": run_id, "prompt": "go", "cwd": str(ROOT)})
    client.wait_message(
        lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == "session.started", start, 60
    )
    time.sleep(0.2)  # the tool child is started right after the first events
    cancel_msg, sent = client.request("pi/cancel", {"runId": run_id})
    rtts: list[float] = []
    while run_msg not in client.responses:
        rtts.append(round_trip(client))
    answered, _ = client.wait_response(run_msg, 60)
    _, cancel_answer = client.wait_response(cancel_msg, 60)
    receipt = (cancel_answer.get("result") or {}).get("shutdown") or {}
    return CancelTrial(
        latency=answered - sent,
        receipt_ms=float(receipt.get("elapsedMs", 0.0)),
        stage=str(receipt.get("stage")),
        containment=str(receipt.get("containment", "tree (no field)")),
        pids=len(receipt.get("pids", [])),
        survivors=len(receipt.get("survivors", [])),
        rtts=rtts,
    )


def scan_cost(root: Path, containment: str | None, repeats: int = 9) -> dict[str, float]:
    """Median cost of one scan and one reap_orphans, in a fresh process running `root`'s bridge."""
    out = subprocess.run(
        [PYTHON, "-c", SCAN_COST, str(repeats)],
        env=_env(root, containment),
        cwd=str(root),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(root: Path, containment: str | None, label: str, trials: int) -> ModeResult:
    """All figures of one bridge code (`root`) in one containment mode."""
    # cwd is the measured code's root: `python -m` puts it first on sys.path.
    client = LspClient([PYTHON, "-m", "bridge"], env=_env(root, containment), cwd=str(root))
    try:
        client.initialize({"piCommand": stand_ins.leaves_a_child(), "warmPool": False, "engine": "json"})
        idle = idle_round_trips(client, 2.5)
        results = [cancel_trial(client, f"crowd-{index}") for index in range(trials)]
    finally:
        client.close()
    cost = scan_cost(root, containment)
    during = [rtt for trial in results for rtt in trial.rtts]
    return ModeResult(
        label=label,
        cancel_median_ms=ms(median([t.latency for t in results])),
        cancel_max_ms=ms(max(t.latency for t in results)),
        receipt_median_ms=median([t.receipt_ms for t in results]),
        rtt_during_median_ms=ms(median(during)),
        rtt_during_max_ms=ms(max(during)),
        rtt_idle_median_ms=ms(median(idle)),
        rtt_idle_max_ms=ms(max(idle)),
        round_trips_during=len(during),
        scan_ms=ms(cost["scan_s"]),
        reap_ms=ms(cost["reap_s"]),
        containment=results[0].containment,
        survivors=sum(t.survivors for t in results),
    )


def run(procs: int, trials: int, before: Path | None = None) -> dict[str, Any]:
    """The whole benchmark: the crowd, then each bridge code and mode; results as a dict."""
    crowd = start_crowd(procs)
    try:
        modes: list[ModeResult] = []
        if before is not None:
            modes.append(measure(before, None, "before (tree search on the loop)", trials))
        modes.append(measure(ROOT, "tree", "after, tree mode", trials))
        modes.append(measure(ROOT, "cgroup", "after, cgroup mode", trials))
    finally:
        stop_crowd(crowd)
    return {"procs": procs, "trials": trials, "modes": [asdict(mode) for mode in modes]}


def summary(results: dict[str, Any]) -> list[str]:
    """One line per mode."""
    lines = [f"crowd: {results['procs']} idle processes, {results['trials']} cancels per mode"]
    for mode in results["modes"]:
        lines.append(
            f"  {mode['label']:<34} cancel {mode['cancel_median_ms']:7.1f} ms (max "
            f"{mode['cancel_max_ms']:.0f}); pi/runs during cancel median {mode['rtt_during_median_ms']:.1f} "
            f"max {mode['rtt_during_max_ms']:.1f} ms ({mode['round_trips_during']}); idle max "
            f"{mode['rtt_idle_max_ms']:.1f} ms; one scan {mode['scan_ms']:.1f} ms, reap "
            f"{mode['reap_ms']:.2f} ms; receipt {mode['containment']}, survivors {mode['survivors']}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run it and print the summary; the raw figures go to bench/.cache/results-crowd.json."""
    parser = argparse.ArgumentParser(prog="python -m bench crowd", description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=3000, help="idle processes to start")
    parser.add_argument("--trials", type=int, default=5, help="cancels per mode")
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the baseline code")
    args = parser.parse_args(argv)
    results = run(args.procs, args.trials, args.before)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "results-crowd.json").write_text(json.dumps(results, indent=1))
    print("\n".join(summary(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
