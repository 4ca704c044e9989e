"""Run every benchmark, print a summary, rewrite docs/benchmarks.md and docs/benchmarks.png.

python -m bench [--quick]    # --quick: CI's smoke run, small sizes and few trials
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (`python bench/run_all.py`), as CI does
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import agents as stand_ins
from bench.agents import streams
from bench.common import (
    CACHE,
    PI_ACP,
    PI_ACP_VERSION,
    ROOT,
    base_env,
    bridge_argv,
    ensure_pi_acp,
    median,
    ms,
)
from bench.model import DEAD_REGISTRY, scripted_model
from bench.report import acp_agents_section
from bench.suites import (
    checkpoints,
    crowd,
    file_ops,
    gate,
    per_agent,
    realpi,
    sandbox,
    sidebyside,
    throughput,
)
from bench.suites.studies import acp_agents
from bridge.scripted_model import LONG_DEFAULT

DOCS = ROOT / "docs"
# Seconds between two prompts in the first-message benchmark, both modes alike: pi exits a moment
# after its last event, then the pool spawns the next pi, which needs time (more under load) to
# load before it waits on stdin.
PAUSE_BETWEEN_RUNS = 2.0


@dataclass(frozen=True)
class Plan:
    """Sizes and repetitions of one invocation."""

    name: str
    deltas_16: int
    deltas_073: int
    replay_trials: int
    ttfm_trials: int
    cancel_trials: int
    stubborn_trials: int
    startup_trials: int
    sbs_trials: int
    long_scenario: str
    pause: float
    raw_cancel_trials: int
    # Per agent (bench/suites/per_agent.py): trials, and the deltas of its throughput scenario.
    agents_trials: int = 5
    agents_deltas: int = 20_000
    # Alternating trials of the gate's two figures (bench/suites/gate.py): turns, approvals.
    gate_turns: int = 100
    gate_approvals: int = 100
    # The checkpoints' section (bench/suites/checkpoints.py): workspace files, turns, first-delta trials.
    checkpoint_files: int = 10_000
    checkpoint_turns: int = 30
    checkpoint_trials: int = 20
    # Alternating trials of the sandbox's figures (bench/suites/sandbox.py).
    sandbox_trials: int = 100
    # Calls of each file op on each side (bench/suites/file_ops.py).
    file_op_samples: int = 100
    # The ACP agents' study (bench/suites/studies/acp_agents.py), pi-acp's trials: its smoke run
    # only (0: not run); its section comes from `python -m bench acp_agents --write`.
    acp_agents_trials: int = 0


FULL = Plan("full", 100_000, 8_000, 5, 10, 20, 20, 10, 5, "long-20000", PAUSE_BETWEEN_RUNS, 10)
QUICK = Plan(  # a smoke run: every benchmark once, what it measures not to be read
    "quick",
    10_000,
    1_500,
    1,
    1,
    1,
    1,
    1,
    1,
    "long",
    1.0,
    1,
    agents_trials=1,
    agents_deltas=LONG_DEFAULT,
    gate_turns=3,
    gate_approvals=3,
    checkpoint_files=500,
    checkpoint_turns=3,
    checkpoint_trials=2,
    sandbox_trials=3,
    file_op_samples=5,
    acp_agents_trials=1,
)


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=base_env(), timeout=30, check=False)
        return (out.stdout.strip() or out.stderr.strip()).splitlines()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


# --------------------------------------------------------------------------- the benchmarks


def bench_throughput(plan: Plan) -> dict[str, Any]:
    """1 and 5: both formats through the bridge and the floor, alternating trials."""
    out: dict[str, Any] = {}
    for fmt, count in (("1.6", plan.deltas_16), ("0.73", plan.deltas_073)):
        stream = streams.ensure(fmt, count)
        bridge_trials, floor_trials = [], []
        for _ in range(plan.replay_trials):
            floor_trials.append(throughput.floor_trial(stream))
            bridge_trials.append(throughput.bridge_trial(stream))
        mb = stream.size / 1e6
        entry = {
            "deltas": count,
            "lines": stream.lines,
            "mb": mb,
            "bridge": {
                "wall": median([t.wall for t in bridge_trials]),
                "cpu": median([t.cpu for t in bridge_trials]),
                "peak_rss_mb": max(t.peak_rss_kb for t in bridge_trials) / 1024,
                "start_rss_mb": median([t.start_rss_kb for t in bridge_trials]) / 1024,
                "frames": median([t.frames for t in bridge_trials]),
            },
            "floor": {
                "wall": median([t.wall for t in floor_trials]),
                "cpu": median([t.cpu for t in floor_trials]),
                "peak_rss_mb": max(t.peak_rss_kb for t in floor_trials) / 1024,
                "frames": median([t.frames for t in floor_trials]),
            },
        }
        for side in ("bridge", "floor"):
            entry[side]["events_per_s"] = stream.lines / entry[side]["wall"]
            entry[side]["cpu_per_mb"] = entry[side]["cpu"] / mb
        entry["cpu_ratio"] = entry["bridge"]["cpu"] / entry["floor"]["cpu"]
        entry["rate_ratio"] = entry["floor"]["events_per_s"] / entry["bridge"]["events_per_s"]
        out[fmt] = entry
        _log(
            f"throughput {fmt}: {mb:.0f} MB, bridge {entry['bridge']['events_per_s']:,.0f} ev/s "
            f"{entry['bridge']['cpu_per_mb'] * 1000:.1f} ms CPU/MB, floor "
            f"{entry['floor']['events_per_s']:,.0f} ev/s "
            f"{entry['floor']['cpu_per_mb'] * 1000:.1f} ms CPU/MB; CPU ratio {entry['cpu_ratio']:.2f}"
        )
    return out


def _timing_stats(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": ms(median(values)),
        "min_ms": ms(min(values)),
        "max_ms": ms(max(values)),
        "n": len(values),
    }


def bench_first_message(plan: Plan, model: Any) -> dict[str, Any]:
    """2: pi/run → first assistant message, warm pool off and on."""
    out: dict[str, Any] = {}
    for warm in (False, True):
        timings, pool_rss = realpi.first_message(model, warm=warm, trials=plan.ttfm_trials, pause=plan.pause)
        key = "warm" if warm else "cold"
        out[key] = {
            "first": _timing_stats([t.first for t in timings]),
            "first_event": _timing_stats([t.first_event for t in timings]),
            "total": _timing_stats([t.total for t in timings]),
            "pool_rss_mb": median([float(rss) for rss, _ in pool_rss]) / (1 << 20),
            "pool_entries": median([float(n) for _, n in pool_rss]),
            "raw_first_ms": [round(ms(t.first), 2) for t in timings],
        }
        _log(
            f"first message {key}: {out[key]['first']['median_ms']:.1f} ms (run "
            f"{out[key]['total']['median_ms']:.0f} ms)"
        )
    # The pool is judged by what it does: a warm first message well under a cold one.
    out["pool_active"] = out["warm"]["first"]["median_ms"] < 0.5 * out["cold"]["first"]["median_ms"]
    return out


def bench_cancel(plan: Plan, model: Any) -> dict[str, Any]:
    """3: pi/cancel → pi/run answered -32800, mid-stream, mid-tool, and an agent ignoring SIGTERM."""
    out: dict[str, Any] = {}
    for kind in ("stream", "tool", "stubborn"):
        trials = realpi.cancel_trials(
            model, kind, plan.stubborn_trials if kind == "stubborn" else plan.cancel_trials
        )
        out[kind] = {
            **_timing_stats([t.latency for t in trials]),
            "codes": sorted({t.code for t in trials}),
            "stages": sorted({t.stage for t in trials}),
            "left": sum(t.left for t in trials),
            "survivors": sum(t.survivors_in_receipt for t in trials),
            "receipt_median_ms": median([t.receipt_ms for t in trials]),
        }
        out[kind]["raw_ms"] = [round(ms(t.latency), 2) for t in trials]
        if kind in ("stream", "tool"):
            raw = realpi.raw_sigterm_trials(model, kind, plan.raw_cancel_trials)
            out[kind]["baseline"] = {
                **_timing_stats([seconds for seconds, _ in raw]),
                "left": sum(left for _, left in raw),
            }
        _log(
            f"cancel {kind}: median {out[kind]['median_ms']:.1f} ms, max {out[kind]['max_ms']:.1f} "
            f"ms, left {out[kind]['left']}"
        )
    return out


def bench_startup(plan: Plan) -> dict[str, Any]:
    """4: spawn → initialize answered: the bridge, a minimal pygls server, pi-acp; trials interleaved."""
    times: dict[str, list[float]] = {"bridge": [], "pygls": [], "pi_acp": []}
    acp_env = {**base_env(), "npm_config_registry": DEAD_REGISTRY}
    for _ in range(plan.startup_trials):
        times["bridge"] += realpi.startup(bridge_argv(), 1)
        times["pygls"] += realpi.startup(stand_ins.pygls_minimal(), 1)
        if PI_ACP.exists():
            times["pi_acp"] += realpi.startup(["node", str(PI_ACP)], 1, acp=True, env=acp_env)
    out = {name: _timing_stats(values) for name, values in times.items() if values}
    _log(f"startup: bridge {out['bridge']['median_ms']:.0f} ms, pygls {out['pygls']['median_ms']:.0f} ms")
    return out


SBS_FIELDS = (
    "spawn_to_ready",
    "spawn_to_first_chunk",
    "first_prompt_first_chunk",
    "second_prompt_first_chunk",
    "first_prompt_total",
    "second_prompt_total",
    "long_total",
    "long_first",
    "cancel_mid_tool",
    "cpu",
    "cpu_after_ready",
)


def bench_side_by_side(plan: Plan, model: Any) -> dict[str, Any] | None:
    """6: the same sequence on pi-bridge and pi-acp, alternating, `sbs_trials` times."""
    if not ensure_pi_acp():
        install = f"npm install --prefix bench/.cache pi-acp@{PI_ACP_VERSION}"
        _log(f"side by side skipped: pi-acp is not installed ({install})")
        return None
    runs: dict[str, list[sidebyside.Sequence]] = {"bridge": [], "pi_acp": []}
    for _ in range(plan.sbs_trials):
        runs["bridge"].append(
            sidebyside.bridge_sequence(model, long_scenario=plan.long_scenario, pause=plan.pause)
        )
        runs["pi_acp"].append(
            sidebyside.acp_sequence(model, long_scenario=plan.long_scenario, pause=plan.pause)
        )
    out: dict[str, Any] = {"long_scenario": plan.long_scenario}
    for side, seqs in runs.items():
        entry: dict[str, Any] = {name: median([getattr(s, name) for s in seqs]) for name in SBS_FIELDS}
        entry["cancel_mid_tool_max"] = max(s.cancel_mid_tool for s in seqs)
        entry["long_stream"] = median([s.long_total - s.long_first for s in seqs])
        entry["long_chars"] = median([s.long_chars for s in seqs])
        entry["peak_rss_mb"] = median([s.peak_rss_kb for s in seqs]) / 1024
        entry["left_after_cancel"] = sum(s.left_after_cancel for s in seqs)
        entry["banner_first"] = sum(s.banner_first for s in seqs)
        entry["notes"] = [note for s in seqs for note in s.notes]
        entry["n"] = len(seqs)
        entry["raw"] = [asdict(s) for s in seqs]
        out[side] = entry
    b, a = out["bridge"], out["pi_acp"]
    _log(
        f"side by side: first chunk (adapter running) bridge {ms(b['first_prompt_first_chunk']):.0f} ms, "
        f"pi-acp {ms(a['first_prompt_first_chunk']):.0f} ms; "
        f"cancel mid-tool {ms(b['cancel_mid_tool']):.1f} ms, pi-acp {ms(a['cancel_mid_tool']):.1f} ms"
    )
    return out


def bench_crowd(plan: Plan) -> dict[str, Any]:
    """7: cancel and the event loop's responsiveness with thousands of idle processes present."""
    procs = 3000 if plan.name == "full" else 100
    results = crowd.run(procs, trials=5 if plan.name == "full" else 1)
    for line in crowd.summary(results):
        _log(line)
    return results


def bench_gate(plan: Plan, model: Any) -> dict[str, Any]:
    """10: the permission gate: a `full` turn with its extension against one without, one approval."""
    out = {
        "extension": gate.extension_cost(model, plan.gate_turns),
        "approval": gate.approval_cost(model, plan.gate_approvals),
    }
    for line in gate.summary(out):
        _log(line)
    return out


def bench_checkpoints(plan: Plan) -> dict[str, Any]:
    """11: a turn's checkpoints on a generated workspace, and the first delta with them on and off."""
    out = checkpoints.run(plan.checkpoint_files, plan.checkpoint_turns, plan.checkpoint_trials)
    for line in checkpoints.summary(out):
        _log(line)
    return out


def bench_sandbox(plan: Plan, model: Any) -> dict[str, Any]:
    """12: the sandbox: one sandboxed bash call against an unsandboxed one (pi's and the spawn's)."""
    trials = plan.sandbox_trials
    out = {"pi": sandbox.pi_cost(model, trials), "spawn": sandbox.spawn_cost(trials)}
    for line in sandbox.summary(out):
        _log(line)
    return out


def bench_file_ops(plan: Plan) -> dict[str, Any]:
    """13: a read and a write through the bridge's file operations against pi's own."""
    out = file_ops.run(plan.file_op_samples)
    for line in file_ops.summary(out):
        _log(line)
    return out


def bench_acp_agents(plan: Plan) -> dict[str, Any]:
    """15's smoke run: pi-acp directly and through `pi-bridge acp`, when it is installed."""
    results, _ = acp_agents.run(plan.acp_agents_trials, ["pi-acp"], lsp=False, claude=False, pause=1.0)
    for line in acp_agents_section.summary(results):
        _log(line)
    return results


# --------------------------------------------------------------------------- main


EVERYTHING = frozenset(
    {
        "throughput",
        "first",
        "cancel",
        "startup",
        "side",
        "crowd",
        "agents",
        "gate",
        "checkpoints",
        "sandbox",
        "fileops",
        "acpagents",
    }
)


def _parser() -> argparse.ArgumentParser:
    """The command line of `python -m bench`."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small sizes, few trials, docs untouched"
    )
    parser.add_argument("--no-docs", action="store_true", help="print the summary only")
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run only these: throughput first cancel startup side crowd agents gate checkpoints sandbox "
        "fileops acpagents",
    )
    parser.add_argument(
        "--render", action="store_true", help="only rewrite the docs from the last full run's results"
    )
    return parser


def _render_last_full_run() -> int:
    """--render: rewrite the docs from bench/.cache/results-full.json, running nothing."""
    from bench.report.chart import render_chart
    from bench.report.document import render_markdown

    results = json.loads((CACHE / "results-full.json").read_text())
    (DOCS / "benchmarks.md").write_text(render_markdown(results))
    render_chart(results, DOCS / "benchmarks.png")
    _log("rewrote docs/benchmarks.md and docs/benchmarks.png from bench/.cache/results-full.json")
    return 0


def _invocation(plan: Plan, quick: bool) -> dict[str, Any]:
    """What the results say about this invocation before any benchmark runs."""
    return {
        "plan": asdict(plan),
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "node": _version(["node", "--version"]),
            "pi": _version(["pi", "--version"]),
            "load_before": os.getloadavg()[0],
        },
        "command": "python -m bench" + (" --quick" if quick else ""),
    }


def _bench_with_model(plan: Plan, only: set[str], results: dict[str, Any]) -> None:
    """2, 3, 6, 10 and 11, those of them in ``only``: the benchmarks that share one scripted model."""
    with scripted_model() as model:
        if "first" in only:
            results["first_message"] = bench_first_message(plan, model)
        if "cancel" in only:
            results["cancel"] = bench_cancel(plan, model)
        if "side" in only:
            results["side_by_side"] = bench_side_by_side(plan, model)
        if "gate" in only:
            results["gate"] = bench_gate(plan, model)
        if "sandbox" in only:
            results["sandbox"] = bench_sandbox(plan, model)


def _bench_agents(plan: Plan) -> list[dict[str, Any]]:
    """9: each agent through the bridge against its own raw CLI (bench/suites/per_agent.py)."""
    entries: list[dict[str, Any]] = per_agent.run(plan.agents_trials, plan.agents_deltas, ["pi", "claude"])
    for entry in entries:
        _log(
            f"agent {entry['agent']}: first message {entry['firstMessageMs']['bridge']:.0f} ms vs raw "
            f"{entry['firstMessageMs']['rawCli']:.0f} ms; {entry['deltas']} deltas "
            f"{entry['longRunMs']['bridge']:.0f} ms vs raw {entry['longRunMs']['rawCli']:.0f} ms"
        )
    return entries


def _run_benchmarks(plan: Plan, only: set[str], results: dict[str, Any]) -> None:
    """Run the benchmarks named in ``only``, each adding its figures to ``results``."""
    if "throughput" in only:
        results["throughput"] = bench_throughput(plan)
    if "startup" in only:
        results["startup"] = bench_startup(plan)
    if "crowd" in only:
        results["crowd"] = bench_crowd(plan)
    if only & {"first", "cancel", "side", "gate", "sandbox"}:
        _bench_with_model(plan, only, results)
    if "agents" in only:
        results["agents"] = _bench_agents(plan)
    if "checkpoints" in only:
        results["checkpoints"] = bench_checkpoints(plan)
    if "fileops" in only:
        results["file_ops"] = bench_file_ops(plan)
    if "acpagents" in only and plan.acp_agents_trials:
        results["acp_agents"] = bench_acp_agents(plan)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; rewrite the docs unless --no-docs (a quick run never rewrites them)."""
    args = _parser().parse_args(argv)
    if args.render:
        return _render_last_full_run()
    plan = QUICK if args.quick else FULL
    only = set(args.only) if args.only else set(EVERYTHING)
    started = time.perf_counter()
    results = _invocation(plan, args.quick)
    _log(f"plan {plan.name}: {results['machine']}")
    _run_benchmarks(plan, only, results)
    results["seconds"] = time.perf_counter() - started
    results["machine"]["load_after"] = os.getloadavg()[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    complete = only == EVERYTHING
    name = f"results-{plan.name}.json" if complete else f"results-{plan.name}-partial.json"
    (CACHE / name).write_text(json.dumps(results, indent=1, default=str))
    from bench.report.chart import render_chart
    from bench.report.document import render_markdown, summary_lines

    print("\n".join(summary_lines(results)))
    if not args.quick and not args.no_docs and complete:
        (DOCS / "benchmarks.md").write_text(render_markdown(results))
        render_chart(results, DOCS / "benchmarks.png")
        _log("wrote docs/benchmarks.md and docs/benchmarks.png")
    _log(f"done in {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
