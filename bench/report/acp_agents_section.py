"""The ACP agents' section of docs/benchmarks.md (bench/suites/studies/acp_agents.py): medians, the
bridge's added cost against the agent driven directly, and the section put in place of its own."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from typing import Any

#: The section's heading starts so: what `--write` replaces and a full `python -m bench` keeps.
HEADING = "## 15. ACP agents"
#: The bridge may add this much to a follow-up's first chunk (ms); a cancel is to be no slower.
FOLLOW_UP_BUDGET_MS = 3.0
#: How each way of driving the agent is named in the table (the direct one is the baseline).
SIDES = {"direct": "direct", "acp": "`pi-bridge acp`", "lsp": "LSP front"}
#: Where a section goes when the file has none yet: before this one, else at the end.
BEFORE = "## Reproducing and profiling"
#: Prose is wrapped as docs/benchmarks.md has it.
WIDTH = 100

Trial = dict[str, float]
Results = dict[str, dict[str, list[Trial]]]


def medians(results: Results) -> dict[str, dict[str, dict[str, float]]]:
    """Per agent and side: the median follow-up and cancel (ms), and the processes left (all trials)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for agent, sides in results.items():
        out[agent] = {}
        for side, trials in sides.items():
            if not trials:
                continue
            out[agent][side] = {
                "follow_up_ms": statistics.median(t["follow_up"] for t in trials) * 1000,
                "cancel_ms": statistics.median(t["cancel"] for t in trials) * 1000,
                "left": float(sum(t["left"] for t in trials)),
                "n": float(len(trials)),
            }
            for key in ("own_follow_up", "own_cancel"):
                shares = [t[key] for t in trials if key in t]
                if shares:
                    out[agent][side][f"{key}_ms"] = statistics.median(shares) * 1000
    return out


def _added(value: float, base: float) -> str:
    return f"{value - base:+.1f} ms"


def _own(figures: dict[str, float], key: str) -> str:
    value = figures.get(f"{key}_ms")
    return "—" if value is None else f"{value:.2f} ms"


def rows(agent: str, figures: dict[str, dict[str, float]]) -> list[list[str]]:
    """One agent's rows: each way of driving it against direct, with the targets met or not."""
    base = figures["direct"]
    out = [
        [
            agent,
            "direct",
            f"{base['follow_up_ms']:.1f} ms",
            "—",
            "—",
            f"{base['cancel_ms']:.1f} ms",
            "—",
            "—",
            f"{base['left']:.0f}",
            "baseline",
        ]
    ]
    for side in ("acp", "lsp"):
        if side not in figures:
            continue
        f = figures[side]
        # The follow-up's budget is the bridge's own share (the agent's own time swings more
        # between trials than the budget); the cancel is judged end to end.
        follow_up = f.get("own_follow_up_ms", f["follow_up_ms"] - base["follow_up_ms"])
        met = follow_up <= FOLLOW_UP_BUDGET_MS and f["cancel_ms"] <= base["cancel_ms"] and f["left"] == 0
        out.append(
            [
                agent,
                SIDES[side],
                f"{f['follow_up_ms']:.1f} ms",
                _added(f["follow_up_ms"], base["follow_up_ms"]),
                _own(f, "own_follow_up"),
                f"{f['cancel_ms']:.1f} ms",
                _added(f["cancel_ms"], base["cancel_ms"]),
                _own(f, "own_cancel"),
                f"{f['left']:.0f}",
                "yes" if met else "NO",
            ]
        )
    return out


def _table(body: list[list[str]], header: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in body]


HEADER = [
    "agent",
    "driven",
    "follow-up → first chunk",
    "added",
    "the bridge's own",
    "cancel → answered",
    "added",
    "the bridge's own",
    "left in /proc",
    "target met",
]


def summary(results: Results) -> list[str]:
    """The console lines of a run: every agent's table (none installed: says so)."""
    figures = medians(results)
    body = [row for agent in figures if "direct" in figures[agent] for row in rows(agent, figures[agent])]
    return _table(body, HEADER) if body else ["acp agents: none of the catalog installed, nothing run"]


def claude_lines(claude: dict[str, Any] | None) -> list[str]:
    """Claude Code's follow-up live against a spawn per prompt (bench/suites/per_agent.py's figures)."""
    if not claude:
        return []
    f = claude["followUpFirstMessageMs"]
    how = (
        "Claude Code (the `claude` agent, not an ACP adapter) on the LSP front: a conversation's "
        "follow-up on its live process, with Claude Code the server's agent (`--agent claude`) and "
        'chosen per run on a pi bridge (`agent: "claude"`), against a process per prompt (the '
        'one-process engine, `engine: "json"`: the path a run that named Claude Code took before '
        "it was live however chosen), and the raw CLI spawned per prompt; "
        f"`bench/suites/per_agent.py`'s `follow_ups`, medians of {claude['trials']}."
    )
    return [
        *textwrap.wrap(how, WIDTH),
        "",
        *_table(
            [
                [
                    f"{f['live']:.0f} ms",
                    f"{f['chosenPerRun']:.0f} ms" if "chosenPerRun" in f else "—",
                    f"{f['perPrompt']:.0f} ms",
                    f"{f['rawCli']:.0f} ms",
                    f"x{claude['perPromptOverLive']:.2f}",
                ]
            ],
            [
                "live (`--agent claude`), follow-up → first message",
                "live, chosen per run",
                "a process per prompt",
                "raw CLI per prompt",
                "per prompt / live",
            ],
        ),
        "",
    ]


def section(
    results: Results,
    claude: dict[str, Any] | None,
    *,
    command: str,
    trials: int,
    load: tuple[float, float],
    cpus: int,
    pause: float,
    absent: Sequence[str] = (),
) -> list[str]:
    """The whole section: how it was run, one table of every agent, Claude Code's follow-up."""
    figures = medians(results)
    body = [row for agent in figures if "direct" in figures[agent] for row in rows(agent, figures[agent])]
    lsp = any("lsp" in sides for sides in figures.values())
    how = (
        "Every ACP agent of bridge/agents/acp/catalog.py that is installed, against the scripted "
        "model (scenario `shell`) on 127.0.0.1, driven by the same ACP client "
        "(bench/clients/acp.py) directly and through `pi-bridge acp --no-warm-pool --agent NAME`"
        + (", and by `pi/run` through the LSP front (`--agent NAME`, `warmPool: false`)" if lsp else "")
        + "; a fresh agent and bridge per trial, the ways interleaved. Neither bridge way keeps a "
        "spare agent: one booting in the pause before the follow-up takes a core from it "
        "(measured so on OpenCode, whose start is long). "
        f"Follow-up: the second prompt of a session, sent {pause:g} s after the first one's answer "
        "(as a user's next prompt comes) → its first answer chunk. Cancel: "
        "`session/cancel` (`pi/cancel`) once `sleep 30` runs → the prompt answered; left: the "
        "command's processes alive in /proc at that answer, summed over the trials. The bridge's "
        "own: its share of the client's time, read off its trace (PI_BRIDGE_TRACE, whose clock is "
        "the client's): all of it but the agent's own, from the prompt written to the agent to the "
        "line of the first chunk read, and from the cancel's first stage (which writes "
        "`session/cancel`) to the agent's answer read. Target: the bridge's own share of the "
        f"follow-up at most {FOLLOW_UP_BUDGET_MS:g} ms, a cancel no slower end to end, nothing left. "
        f"Medians of {trials} trials; load average {load[0]:.2f} before and {load[1]:.2f} after "
        f"on {cpus} cores." + (f" Not installed, so not measured: {', '.join(absent)}." if absent else "")
    )
    return [
        f"{HEADING}, through the bridge and driven directly (`bench/suites/studies/acp_agents.py`)",
        "",
        "```",
        command,
        "```",
        "",
        *textwrap.wrap(how, WIDTH),
        "",
        *([*_table(body, HEADER), ""] if body else []),
        *claude_lines(claude),
    ]


def replace_section(text: str, lines: list[str]) -> str:
    """`text` (docs/benchmarks.md) with its ACP agents' section replaced by `lines`, or added
    before BEFORE (at the end when there is none); every other section left as it was."""
    new = "\n".join(lines).rstrip("\n") + "\n"
    start = text.find("\n" + HEADING)
    if start >= 0:
        start += 1
        end = text.find("\n## ", start + len(HEADING))
        rest = text[end + 1 :] if end >= 0 else ""
        return text[:start] + new + ("\n" + rest if rest else "")
    anchor = text.find("\n" + BEFORE)
    if anchor >= 0:
        return text[: anchor + 1] + new + "\n" + text[anchor + 1 :]
    return text.rstrip("\n") + "\n\n" + new
