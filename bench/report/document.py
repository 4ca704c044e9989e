"""Turn one invocation's results into the console summary, docs/benchmarks.md and the chart."""

from __future__ import annotations

from typing import Any

from bench.common import ROOT
from bench.report.acp_agents_section import HEADING as ACP_AGENTS_HEADING
from bench.report.checkpoint_section import checkpoint_rows, checkpoints_section
from bench.report.gate_section import commits_section, gate_rows, gate_section
from bench.report.sandbox_section import file_ops_section, sandbox_rows, sandbox_section
from bench.suites import crowd

DOCS = ROOT / "docs"

R = dict[str, Any]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _stat(s: R) -> str:
    return f"{s['median_ms']:.1f} ms (max {s['max_ms']:.1f})"


def _throughput_rows(res: R) -> list[list[str]]:
    rows = []
    for fmt, label in (("1.6", "1.6 format"), ("0.73", "0.73 format (cumulative snapshots)")):
        t = res.get("throughput", {}).get(fmt)
        if not t:
            continue
        b, f = t["bridge"], t["floor"]
        size = f"{t['deltas']:,} deltas, {t['mb']:.0f} MB"
        rows.append(
            [
                f"Throughput, {label}: pi events/s ({size})",
                f"{b['events_per_s']:,.0f}",
                f"floor {f['events_per_s']:,.0f}",
                f"{f['events_per_s'] / b['events_per_s']:.2f}x slower"
                if b["events_per_s"] < f["events_per_s"]
                else f"{b['events_per_s'] / f['events_per_s']:.2f}x faster",
                "within 1.5x of the floor",
                "yes" if t["rate_ratio"] <= 1.5 else "NO",
            ]
        )
        rows.append(
            [
                f"Throughput, {label}: CPU per MB of pi output",
                f"{b['cpu_per_mb'] * 1000:.1f} ms/MB",
                f"floor {f['cpu_per_mb'] * 1000:.1f} ms/MB",
                _ratio(b["cpu"], f["cpu"]),
                "within 1.5x of the floor",
                "yes" if t["cpu_ratio"] <= 1.5 else "NO",
            ]
        )
    big = res.get("throughput", {}).get("0.73")
    if big:
        rows.append(
            [
                f"Peak RSS while streaming the largest replay ({big['mb']:.0f} MB)",
                f"{big['bridge']['peak_rss_mb']:.0f} MB (idle {big['bridge']['start_rss_mb']:.0f} MB)",
                f"floor {big['floor']['peak_rss_mb']:.0f} MB",
                _ratio(big["bridge"]["peak_rss_mb"], big["floor"]["peak_rss_mb"]),
                "under 150 MB",
                "yes" if big["bridge"]["peak_rss_mb"] < 150 else "NO",
            ]
        )
    return rows


def _realpi_rows(res: R) -> list[list[str]]:
    rows = []
    fm = res.get("first_message")
    if fm:
        cold, warm = fm["cold"]["first"], fm["warm"]["first"]
        rows.append(
            ["Time to first message, cold (pi/run → first `assistant`)", _stat(cold), "—", "—", "—", "—"]
        )
        if fm["pool_active"]:
            rows.append(
                [
                    "Warm pool: memory of the idle pre-spawned pi (pi/runs `warmRssBytes`)",
                    f"{fm['warm']['pool_rss_mb']:.0f} MB"
                    + (
                        f" in {fm['warm']['pool_entries']:.0f} idle pi"
                        if fm["warm"].get("pool_entries")
                        else ""
                    ),
                    "—",
                    "—",
                    "reported",
                    "yes",
                ]
            )
        if fm["pool_active"]:
            rows.append(
                [
                    "Time to first message, warm pool",
                    _stat(warm),
                    f"cold {cold['median_ms']:.1f} ms",
                    f"{warm['median_ms'] / cold['median_ms']:.2f}x",
                    "≤ 50 ms",
                    "yes" if warm["median_ms"] <= 50 else "NO",
                ]
            )
        else:
            rows.append(
                [
                    "Time to first message, warm pool",
                    f"not yet (warmPool: true measured {warm['median_ms']:.1f} ms: no pool in the bridge)",
                    f"cold {cold['median_ms']:.1f} ms",
                    "—",
                    "≤ 50 ms",
                    "not yet",
                ]
            )
    ca = res.get("cancel")
    if ca:
        labels = {
            "stream": ("Cancel → answered, real pi mid-stream (`slow`)", "—", None),
            "tool": (
                "Cancel → answered, real pi mid-tool (`sleep 30`)",
                "median ≤ 500 ms, nothing left",
                500.0,
            ),
            "stubborn": (
                "Cancel → answered, agent ignoring SIGTERM/SIGINT",
                "just over 2 s, nothing left",
                7500.0,
            ),
        }
        for kind, (label, target, bound) in labels.items():
            c = ca[kind]
            ok = c["left"] == 0 and c["survivors"] == 0 and (bound is None or c["median_ms"] <= bound)
            base = c.get("baseline")
            rows.append(
                [
                    f"{label}, {c['n']} trials",
                    f"{_stat(c)}; {c['left']} processes left",
                    f"pi alone, SIGTERM → exit: {_stat(base)}; {base['left']} left" if base else "—",
                    _ratio(c["median_ms"], base["median_ms"]) if base else "—",
                    target,
                    "yes" if ok else "NO",
                ]
            )
    st = res.get("startup")
    if st:
        rows.append(
            [
                "Start-up: spawn → `initialize` answered",
                _stat(st["bridge"]),
                f"minimal pygls server {st['pygls']['median_ms']:.1f} ms",
                _ratio(st["bridge"]["median_ms"], st["pygls"]["median_ms"]),
                "nothing but pygls on the start-up path",
                "see note",
            ]
        )
    return rows


SBS_ROWS = (
    ("spawn_to_ready", "Adapter spawn → ready (bridge: `initialize`; pi-acp: `initialize`)"),
    ("spawn_to_first_chunk", "Cold: adapter spawn → first answer chunk (pi-acp includes `session/new`)"),
    ("first_prompt_first_chunk", "First prompt → first answer chunk (adapter running)"),
    ("second_prompt_first_chunk", "Second prompt → first answer chunk"),
    ("first_prompt_total", "Total time of a run (`text`, first prompt)"),
    ("second_prompt_total", "Total time of a run (`text`, second prompt)"),
    ("long_total", "Total time of a long run"),
    ("long_stream", "Long run, first chunk → answered (streaming only)"),
    ("cancel_mid_tool", "Cancel mid-tool → prompt answered"),
    ("cpu", "Adapter CPU over the whole sequence (own process)"),
    ("cpu_after_ready", "Adapter CPU after start-up (own process)"),
    ("peak_rss_mb", "Adapter peak RSS"),
    ("left_after_cancel", "Tool processes left after cancel (all trials)"),
)


def _sbs_rows(res: R) -> list[list[str]]:
    sbs = res.get("side_by_side")
    if not sbs:
        return []
    b, a = sbs["bridge"], sbs["pi_acp"]
    rows = []
    for key, label in SBS_ROWS:
        name = f"{label} (`{sbs['long_scenario']}`)" if key in {"long_total", "long_stream"} else label
        bv, av = b[key], a[key]
        if key in ("cpu", "cpu_after_ready"):
            bs, as_ = f"{bv:.2f} s", f"{av:.2f} s"
        elif key == "peak_rss_mb":
            bs, as_ = f"{bv:.0f} MB", f"{av:.0f} MB"
        elif key == "left_after_cancel":
            bs, as_ = str(bv), str(av)
        else:
            bs, as_ = _ms(bv), _ms(av)
        ratio = _ratio(bv, av) if av else ("=" if bv == av else "n/a")
        ahead = "yes" if bv <= av else "no"
        rows.append([name, bs, f"pi-acp {as_}", ratio, "at or ahead of pi-acp", ahead])
    return rows


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


HEADER = ["metric", "pi-bridge", "baseline (same invocation)", "ratio", "target", "met"]


def summary_lines(res: R) -> list[str]:
    """The console summary: every row of the docs table."""
    rows = _throughput_rows(res) + _realpi_rows(res) + _sbs_rows(res) + gate_rows(res)
    rows += checkpoint_rows(res) + sandbox_rows(res)
    width = max((len(r[0]) for r in rows), default=10)
    out = ["", f"pi-bridge benchmarks ({res['command']}, {res['seconds']:.0f} s)"]
    for row in rows:
        out.append(f"{row[0]:<{width}}  {row[1]:<34} {row[2]:<34} {row[3]:<14} {row[5]}")
    if res.get("crowd"):
        out.extend(crowd.summary(res["crowd"]))
    return out


AGENTS_COMMAND = "python -m bench per_agent --trials 5 --deltas 20000"


def agents_section(entries: list[dict[str, Any]], command: str = AGENTS_COMMAND) -> list[str]:
    """Section 9: each agent through the bridge against its own raw CLI (bench/suites/per_agent.py)."""
    if not entries:
        return []
    trials, deltas = entries[0]["trials"], entries[0]["deltas"]
    rows = []
    for e in entries:
        name = "Claude Code" if e["agent"] == "claude" else e["agent"]
        first, long_run, rate = e["firstMessageMs"], e["longRunMs"], e["deltasPerSecond"]
        rows.append(
            [
                name,
                f"{first['bridge']:.0f} ms",
                f"{first['rawCli']:.0f} ms",
                f"x{e['ratioFirstMessage']:.2f}",
                f"{long_run['bridge'] / 1000:.2f} s ({rate['bridge']:,.0f}/s)",
                f"{long_run['rawCli'] / 1000:.2f} s ({rate['rawCli']:,.0f}/s)",
                f"x{e['ratioLongRun']:.2f}",
            ]
        )
    return [
        "## 9. Per agent: each agent CLI against its own raw CLI",
        "",
        f"`{command}` (also part of `python -m bench`; `--quick` runs 1 trial of 2 000 deltas). "
        f"Medians of {trials} trials after one unmeasured run each. The floor is the agent's CLI "
        "spawned with exactly the launch the bridge uses (argv, environment, prompt on stdin), in "
        "the same invocation: first message = request sent → first `assistant` message (raw: its "
        f"first text-delta line); throughput = the `long-{deltas}` scenario, request sent → answer "
        "(raw: spawn → exit).",
        "",
        *_table(
            rows,
            [
                "agent",
                "first message, bridge",
                "raw CLI",
                "ratio",
                f"{deltas:,} deltas, bridge",
                "raw CLI",
                "ratio",
            ],
        ),
        "",
    ]


def _kept_section(heading: str) -> list[str]:
    """A section another command writes (`python -m bench conversation`), carried over from the
    current file."""
    path = DOCS / "benchmarks.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    start = text.find(heading)
    if start < 0:
        return []
    end = text.find("\n## ", start + len(heading))
    return [*text[start : end if end >= 0 else len(text)].rstrip("\n").split("\n"), ""]


def _kept_paragraph(marker: str) -> list[str]:
    """A paragraph another command writes (`python -m bench per_agent --follow-up`), from the current file."""
    path = DOCS / "benchmarks.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    start = text.find(marker)
    if start < 0:
        return []
    end = text.find("\n\n", start)
    return [*text[start : end if end >= 0 else len(text)].split("\n"), ""]


def render_markdown(res: R) -> str:
    """docs/benchmarks.md."""
    m = res["machine"]
    plan = res["plan"]
    lines = [
        "# Benchmarks",
        "",
        "Every figure below comes from one invocation of",
        "",
        "```",
        f"{res['command']}        # from the repository root, with the project's venv active",
        "```",
        "",
        f"run on {res['when']} on a {m['cpus']}-core machine (Python {m['python']}, Node "
        f"{m['node']}, pi {m['pi']},",
        f"load average {m['load_before']:.2f} before and {m['load_after']:.2f} after), in "
        f"{res['seconds']:.0f} s. Each is a median over",
        "repeated runs, next to its baseline measured in the same invocation. `python -m bench "
        "--quick` is the",
        "smoke run CI uses (small sizes, few trials; it does not rewrite this file). Raw figures "
        "of the last run:",
        "`bench/.cache/results-full.json`.",
        "",
        "![time to first message and cancel latency](benchmarks.png)",
        "",
        "## Summary",
        "",
        *_table(
            _throughput_rows(res)
            + _realpi_rows(res)
            + gate_rows(res)
            + checkpoint_rows(res)
            + sandbox_rows(res),
            HEADER,
        ),
        "",
    ]
    lines += _method_sections(res, plan)
    if res.get("crowd"):
        lines += ["", "## Cancel with thousands of idle processes (`bench/suites/crowd.py`)", "", "```"]
        lines += [*crowd.summary(res["crowd"]), "```"]
    acp_section = DOCS / "benchmarks-acp.md"  # written by `python -m bench acp_side --write`
    if acp_section.exists():
        lines += ["", acp_section.read_text().rstrip()]
    return "\n".join(lines) + "\n"


def _throughput_section(t: R, plan: R) -> list[str]:
    """Sections 1 and 5: how throughput, CPU and memory are measured, and the figures per stream."""
    out: list[str] = [
        "## 1. Throughput and CPU, 5. memory",
        "",
        "`bench/agents/replay_agent.py` stands in for pi: it reads its stdin to EOF, then copies a "
        "generated stream",
        "(`bench/agents/streams.py`) to stdout with `sendfile`, as fast as the pipe allows. The "
        "bridge is started with",
        "`piCommand` = the replay agent and driven by a raw client (`bench/clients/lsp.py`) that only "
        "counts `pi/message`",
        "frames; its CPU is read from `/proc/<pid>/stat` (all threads, not its children) before `pi/run` and",
        "after the answer, its peak RSS from `VmHWM` (a fresh bridge per trial). The floor, "
        "`bench/agents/floor.py`,",
        "spawns the same replay agent, splits lines, orjson-parses each, and writes one framed notification",
        "per delta; it reports its own CPU and peak RSS. Both check that the whole text arrived.",
        f"Medians of {plan['replay_trials']} trials each, bridge and floor alternating.",
        "",
        "| stream | size | consumer | wall | pi events/s | CPU | CPU per MB | frames out | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for fmt in ("1.6", "0.73"):
        e = t.get(fmt)
        if not e:
            continue
        for side in ("bridge", "floor"):
            s = e[side]
            out.append(
                f"| {fmt}, {e['deltas']:,} deltas | {e['mb']:.1f} MB, {e['lines']:,} lines | "
                f"{side} | {s['wall']:.3f} s | "
                f"{s['events_per_s']:,.0f} | {s['cpu']:.2f} s | {s['cpu_per_mb'] * 1000:.1f} "
                f"ms/MB | {s['frames']:,.0f} | {s['peak_rss_mb']:.0f} MB |"
            )
    out += [
        "",
        "The bridge writes fewer frames than the floor: it merges the deltas read in one chunk into one",
        "`assistant` message (same text, fewer frames). Its peak RSS includes ~55 MB of interpreter and",
        "imports at idle (pygls, lsprotocol, pydantic); the growth while streaming is the difference.",
        "",
    ]
    return out


def _first_message_section(fm: R, plan: R) -> list[str]:
    """Section 2: time to first message, cold and with the warm pool."""
    out: list[str] = [
        "## 2. Time to first message",
        "",
        "One bridge, real pi 1.6.0, scripted model `text` on loopback; `pi/run` sent → first `assistant`",
        f"notification, {fm['cold']['first']['n']} runs after one unmeasured run, "
        f"{plan['pause']:g} s apart (time for pi to exit",
        "and for the pool to spawn and load the next pi, as between two prompts of a user). Cold:",
        '`warmPool: false`. Warm: `warmPool: true`. "First event" is the run\'s first '
        "`pi/message` of any type",
        "(`session.started`, from pi's first line): it shows how soon the bridge has pi going.",
        "",
        "| mode | first message median | min | max | first event median | whole run median | idle pool RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in ("cold", "warm"):
        f, tot, ev = fm[key]["first"], fm[key]["total"], fm[key]["first_event"]
        name = (
            key
            if key == "cold" or fm["pool_active"]
            else "warm (not yet: no pool in the bridge; figures are cold spawns)"
        )
        entries = fm[key].get("pool_entries")
        pool = f"{fm[key]['pool_rss_mb']:.0f} MB" if key == "warm" else "—"
        if key == "warm" and entries:
            pool += f" ({entries:.0f} idle pi)"
        out.append(
            f"| {name} | {f['median_ms']:.1f} ms | {f['min_ms']:.1f} ms | {f['max_ms']:.1f} ms | "
            f"{ev['median_ms']:.1f} ms | {tot['median_ms']:.0f} ms | {pool} |"
        )
    out.append("")
    return out


def _cancel_section(ca: R) -> list[str]:
    """Section 3: cancel latency per case, then pi alone sent SIGTERM as the baseline."""
    out: list[str] = [
        "## 3. Cancel latency",
        "",
        "`pi/cancel` sent → `pi/run` answered -32800, with `warmPool: false`. Mid-stream: after the first",
        "`assistant` message of model `slow`. Mid-tool: after `tool.call` of model `toolslow`, once the",
        "bash tool's `sleep 30` is running. Stubborn: the fake pi's `ignore_interrupt`",
        "(tests/fakes/fake_pi.py) ignores SIGTERM and SIGINT, so",
        "the 2 s grace runs out and the kill stage ends it. Processes left: the bridge's descendants",
        "snapshotted just before the cancel that are still alive (zombies count as dead) after the answer,",
        "plus any live descendant of the bridge then that was not in the snapshot, less the pis it",
        "keeps on purpose, the git of its own checkpoint snapshot (no process of the run; it ends by",
        "itself) and a new child of the bridge caught between its fork and its exec (the next agent it",
        "starts: its command line is still the bridge's). Baseline, same invocation:",
        "pi started directly and",
        "sent SIGTERM by hand at the same moment (the least any cancel that stops pi can take).",
        "",
        "| case | trials | median | min | max | shutdown itself (receipt elapsedMs, median) | "
        "error code | stage | processes left | receipt survivors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, name in (
        ("stream", "real pi mid-stream"),
        ("tool", "real pi mid-tool"),
        ("stubborn", "ignores the interrupt"),
    ):
        c = ca[kind]
        out.append(
            f"| {name} | {c['n']} | {c['median_ms']:.1f} ms | {c['min_ms']:.1f} ms | "
            f"{c['max_ms']:.1f} ms | "
            f"{c['receipt_median_ms']:.1f} ms | {', '.join(map(str, c['codes']))} | "
            f"{', '.join(c['stages'])} | {c['left']} | {c['survivors']} |"
        )
    for kind, name in (
        ("stream", "pi alone mid-stream, SIGTERM → exit"),
        ("tool", "pi alone mid-tool, SIGTERM → exit"),
    ):
        base = ca[kind].get("baseline")
        if base:
            out.append(
                f"| {name} (baseline) | {base['n']} | {base['median_ms']:.1f} ms | "
                f"{base['min_ms']:.1f} ms | "
                f"{base['max_ms']:.1f} ms | — | — | — | {base['left']} | — |"
            )
    out.append("")
    return out


def _startup_section(st: R) -> list[str]:
    """Section 4: spawn to `initialize` answered, per server."""
    out: list[str] = [
        "## 4. Start-up",
        "",
        f"Process spawned → `initialize` answered, median of {st['bridge']['n']}. Baseline: "
        "`bench/agents/pygls_min.py`, a",
        "pygls `LanguageServer` that does nothing else; pi-acp (Node) for comparison; interleaved.",
        "",
        "| server | median | min | max |",
        "|---|---|---|---|",
    ]
    for key, name in (
        ("bridge", "pi-bridge"),
        ("pygls", "minimal pygls server"),
        ("pi_acp", "pi-acp 0.0.34"),
    ):
        if key in st:
            s = st[key]
            out.append(f"| {name} | {s['median_ms']:.1f} ms | {s['min_ms']:.1f} ms | {s['max_ms']:.1f} ms |")
    out.append("")
    return out


def _side_by_side_section(res: R, sbs: R) -> list[str]:
    """Section 6: the same sequence on pi-bridge and pi-acp."""
    out: list[str] = [
        "## 6. Side by side with pi-acp 0.0.34",
        "",
        "The same sequence on each adapter, freshly started, alternating, "
        f'{sbs["bridge"]["n"]} times: start; prompt "Say hello" (model `text`);',
        "the same prompt again (same ACP session); model `toolslow`, cancelled once `sleep 30` runs; model",
        f"`{sbs['long_scenario']}`. Same pi 1.6.0 (pi-acp finds it on PATH), same scripted model",
        "(`PI_CODING_AGENT_DIR`, `PI_OFFLINE=1`), same prompts. pi-acp is driven by "
        "`bench/clients/acp.py`, a small ACP",
        "client (newline-delimited JSON-RPC: `initialize`, `session/new`, `session/prompt`, "
        "`session/cancel`,",
        '`session/set_config_option` for the model). "First answer chunk" is the first chunk '
        "holding model text.",
        "pi-acp runs `npm view` on every `session/new`; its registry was pointed at a closed "
        "loopback port so",
        "the benchmark stays on loopback (the lookup fails fast). CPU is the adapter's own process only:",
        "pi-acp's helper processes (`pi --version`, `npm view`) and pi itself are not counted "
        "on either side.",
        "",
        *_table(_sbs_rows(res), ["metric", "pi-bridge", "pi-acp", "ratio bridge/pi-acp", "target", "ahead"]),
        "",
    ]
    if sbs["pi_acp"]["banner_first"]:
        out.append(
            f'pi-acp sent a non-answer chunk (its "pi v1.6.0" banner) before the answer in '
            f"{sbs['pi_acp']['banner_first']} of {sbs['pi_acp']['n']} sequences."
        )
        out.append("")
    return out


# The last section: how to run the suite or a part of it, and how to profile the bridge.
_REPRODUCING = (
    "## Reproducing and profiling",
    "",
    "- `python -m bench` (or `python bench/run_all.py`) runs everything above; `--only throughput first",
    "  cancel startup side gate` runs a part (the docs are rewritten only by a full run). pi-acp 0.0.34 is",
    "  installed into `bench/.cache/` with npm on first use; the replay streams are generated there too.",
    "- `python -m bench profile` samples the bridge with py-spy (`--gil`: Python CPU only) while it",
    "  streams both replays, and lists the slowest start-up imports (`-X importtime`); it writes",
    "  `bench/.cache/profile-*.txt`.",
    "- `python -m bench gate` runs section 10 alone; `python -m bench commits BEFORE [AFTER]` runs",
    "  section 11's comparison and stores it for the next full run to show.",
    "- `python -m bench acp_agents --trials 9 --write` runs section 15 and writes it in place of its",
    "  own (a full run keeps it; `--quick`, pi-acp once, is part of `python -m bench --quick`).",
    "",
)


def _method_sections(res: R, plan: R) -> list[str]:
    """Every section after the summary: how each figure was measured, the notes, the kept ones."""
    out: list[str] = []
    t = res.get("throughput")
    if t:
        out += _throughput_section(t, plan)
    fm = res.get("first_message")
    if fm:
        out += _first_message_section(fm, plan)
    ca = res.get("cancel")
    if ca:
        out += _cancel_section(ca)
    st = res.get("startup")
    if st:
        out += _startup_section(st)
    sbs = res.get("side_by_side")
    if sbs:
        out += _side_by_side_section(res, sbs)
    out += _notes(res)
    out += _kept_section("## 7. Live conversations")
    out += agents_section(res.get("agents")) if res.get("agents") else _kept_section("## 9. Per agent")
    out += _kept_paragraph("**Claude Code's follow-up, live.**")
    if res.get("gate"):
        out += gate_section(res["gate"], res["command"])
    if res.get("checkpoints"):
        out += checkpoints_section(res["checkpoints"])
    # Written by hand from `python -m bench checkpoints --files 100000` and the trace studies:
    out += _kept_section("### 11a. Checkpoints at 100,000 files")
    out += _kept_section("## 14. The first prompt's path, traced")
    if res.get("sandbox"):
        out += sandbox_section(res["sandbox"], res["command"])
    if res.get("file_ops"):
        out += file_ops_section(res["file_ops"], res["command"])
    out += _kept_section("## 13a. Reads and writes through the editor")  # `python -m bench editor_fs`
    out += commits_section()
    out += _kept_section(ACP_AGENTS_HEADING)  # written by `python -m bench acp_agents --write`
    out += _REPRODUCING
    return out


def _notes(res: R) -> list[str]:
    """Where the bridge is not ahead or misses a target: by how much and why."""
    out = ["## Where pi-bridge is behind, and why", ""]
    sbs, fm, st = res.get("side_by_side"), res.get("first_message"), res.get("startup")
    notes: list[str] = []
    if fm and fm["pool_active"]:
        notes += _warm_pool_notes(fm, sbs)
    if sbs:
        b, a = sbs["bridge"], sbs["pi_acp"]
        notes += _prompt_notes(b, a)
        notes += _sequence_notes(b, a, st)
    notes += _load_notes(res["machine"])
    if not notes:
        notes.append("- Nowhere in this run.")
    return out + notes + [""]


def _warm_pool_notes(fm: R, sbs: R | None) -> list[str]:
    """The warm pool (active): a first message over its target, slow warm runs, what it keeps idle."""
    notes: list[str] = []
    if fm["warm"]["first"]["median_ms"] > 50:
        warm = fm["warm"]
        notes.append(
            f"- Warm first message: {warm['first']['median_ms']:.1f} ms against the 50 ms target. "
            "The bridge has the warm "
            f"pi going in {warm['first_event']['median_ms']:.1f} ms (its first event); the rest is "
            "pi's first model "
            "request in a fresh process, before its first text delta. pi-acp pays the same once "
            "per pi process: "
            + (
                f"its first prompt takes {_ms(sbs['pi_acp']['first_prompt_first_chunk'])} to the "
                "first chunk, its "
                f"second {_ms(sbs['pi_acp']['second_prompt_first_chunk'])}."
                if sbs
                else "its first prompt is slower than its second."
            )
        )
    raw = fm["warm"].get("raw_first_ms", [])
    slow = [v for v in raw if v > 3 * fm["warm"]["first"]["median_ms"]]
    if slow:
        notes.append(
            f"- Warm pool: {len(slow)} of {len(raw)} warm runs took "
            f"{', '.join(f'{v:.0f}' for v in slow)} ms "
            "to the first message, most likely because the next pi was not loaded yet when the "
            "prompt came (the "
            "machine was loaded; see the last note). Still faster than a cold spawn under that load."
        )
    if (fm["warm"].get("pool_entries") or 0) >= 2:
        notes.append(
            f"- Warm pool cost: after each run the pool keeps {fm['warm']['pool_entries']:.0f} idle pi "
            f"({fm['warm']['pool_rss_mb']:.0f} MB together): one with the same launch and one resuming the "
            "run's session. Both start the moment a run ends, so a next run with other flags starts its "
            "own cold pi while two others load (see the long run below)."
        )
    return notes


def _prompt_notes(b: R, a: R) -> list[str]:
    """The prompts of the side-by-side sequence where the bridge (b) is behind pi-acp (a)."""
    notes: list[str] = []
    if b["first_prompt_first_chunk"] > a["first_prompt_first_chunk"]:
        notes.append(
            f"- First prompt → first chunk: {_ms(b['first_prompt_first_chunk'])} against "
            f"{_ms(a['first_prompt_first_chunk'])} "
            f"({_ratio(b['first_prompt_first_chunk'], a['first_prompt_first_chunk'])}). Both send "
            "it to a pi that is up and idle (the bridge's spare, pi-acp's `session/new` pi); pi's "
            "own first prompt in a fresh process varies by ±10 ms here (section 7 runs raw pi "
            "beside both)."
        )
    if b["second_prompt_first_chunk"] > a["second_prompt_first_chunk"]:
        notes.append(
            f"- Second prompt → first chunk: {_ms(b['second_prompt_first_chunk'])} against "
            f"{_ms(a['second_prompt_first_chunk'])} "
            f"({_ratio(b['second_prompt_first_chunk'], a['second_prompt_first_chunk'])}): both "
            "send it to the conversation's live pi; each adds its own path on both sides of pi "
            "(section 7: about 1-1.6 ms each over raw pi, one sample per trial here)."
        )
    if (
        b["first_prompt_total"] > a["first_prompt_total"]
        or b["second_prompt_total"] > a["second_prompt_total"]
    ):
        notes.append(
            "- Total time of a `text` run: the same per-prompt difference; both then ask pi for "
            "its session stats before they answer."
        )
    return notes


def _sequence_notes(b: R, a: R, st: R | None) -> list[str]:
    """The long run, cancel mid-tool, start-up and CPU where the bridge (b) is behind pi-acp (a)."""
    notes: list[str] = []
    if b["long_total"] > a["long_total"]:
        notes.append(
            f"- Long run: {_ms(b['long_total'])} against {_ms(a['long_total'])}; its first chunk "
            f"took {_ms(b['long_first'])}, and streaming alone (first chunk → answered) is "
            f"{_ms(b['long_stream'])} against {_ms(a['long_stream'])}."
        )
    if b["cancel_mid_tool"] > a["cancel_mid_tool"]:
        notes.append(
            f"- Cancel mid-tool: {_ms(b['cancel_mid_tool'])} against "
            f"{_ms(a['cancel_mid_tool'])}. Both send the live pi an RPC `abort` and wait for its "
            "reply; pi-acp answers then, the bridge once it has proven that every process of "
            "the run is gone (a read of its cgroup after pi's reply; section 7)."
        )
    if b["spawn_to_ready"] > a["spawn_to_ready"]:
        notes.append(
            f"- Start-up: {_ms(b['spawn_to_ready'])} against {_ms(a['spawn_to_ready'])}. "
            "Importing pygls and "
            "lsprotocol is most of it"
            + (f" (a minimal pygls server: {st['pygls']['median_ms']:.0f} ms, section 4)" if st else "")
            + "; pi-acp pays its pi start-up at `session/new` instead."
        )
    if b["cpu"] > a["cpu"]:
        notes.append(
            f"- Adapter CPU over the whole sequence: {b['cpu']:.2f} s against {a['cpu']:.2f} s, "
            "of which start-up "
            f"(interpreter and imports) is {b['cpu'] - b['cpu_after_ready']:.2f} s; after "
            "start-up the bridge "
            f"uses {b['cpu_after_ready']:.2f} s against pi-acp's {a['cpu_after_ready']:.2f} s."
        )
    return notes


def _load_notes(machine: R) -> list[str]:
    """A note when the run shared the machine's cores with other work."""
    notes: list[str] = []
    load = max(machine["load_before"], machine.get("load_after", 0.0))
    if load > machine["cpus"]:
        notes.append(
            f"- This run shared its {machine['cpus']} cores with other work (load average "
            f"up to {load:.1f}): timings that involve starting pi are inflated "
            "and noisy (see the"
            " max columns); ratios measured in the same invocation are the figures to compare."
        )
    return notes
