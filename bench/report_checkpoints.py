"""The checkpoints' rows and section of docs/benchmarks.md (bench/checkpoints.py)."""

from __future__ import annotations

from typing import Any

R = dict[str, Any]


def checkpoint_rows(res: R) -> list[list[str]]:
    """The summary table's rows: the first delta on against off (target: within the noise), and
    what a turn's checkpoints cost on the generated workspace."""
    cp = res.get("checkpoints")
    if not cp:
        return []
    delta, turn = cp["first_delta"], cp["turn"]
    within = abs(delta["added_ms"]) <= delta["noise_ms"]
    return [
        [
            f"Checkpoints on, a {turn['files']:,}-file workspace: pi/run → first assistant message",
            f"{delta['on_ms']:.1f} ms",
            f"off {delta['off_ms']:.1f} ms",
            f"{delta['added_ms']:+.1f} ms",
            f"within the noise (± {delta['noise_ms']:.1f} ms)",
            "yes" if within else "NO",
        ],
        [
            f"Checkpoints: one turn's snapshots and file list, {turn['files']:,} files (p50 / p95)",
            f"{turn['turn_p50_ms']:.0f} / {turn['turn_p95_ms']:.0f} ms",
            f"first snapshot {turn['first_snapshot_ms']:.0f} ms",
            "—",
            "off the first delta",
            "yes" if within else "NO",
        ],
    ]


def checkpoints_section(cp: R) -> list[str]:
    """Section 11: how the checkpoints' figures are measured, and all of them."""
    delta, turn = cp["first_delta"], cp["turn"]
    return [
        "",
        "## 11. Checkpoints (`bench/checkpoints.py`)",
        "",
        f"A generated workspace of {turn['files']:,} small files in 100 folders. **Per turn:** the shadow",
        "repository the bridge keeps for it (bridge/checkpoints/shadow_git.py) takes its first snapshot",
        f"(every file hashed once: {turn['first_snapshot_ms']:.0f} ms), then each of {turn['turns']} turns",
        "changes",
        "5 files and takes what a prompt takes: the snapshot before, the snapshot after, the list of",
        "changed files. After the first snapshot a watcher (inotify, bridge/checkpoints/fs_watch.py) names",
        "the paths that changed and a snapshot reads only those; a snapshot with nothing changed is",
        "the last one again, with no git run. The first snapshot is taken in the background when a",
        "conversation opens, off every prompt's path.",
        "**First delta:** two bridges, one with `checkpoints: false`, each with a live conversation in a",
        f"copy of the workspace; {delta['trials']} `text` prompts alternate between them, pi/run sent →",
        "first `assistant` message. The snapshot before a prompt is taken in a worker thread once the",
        "agent's first output is out, or at once when a tool waits for it (the turn's tools wait for",
        "it); the one after, once the run has answered.",
        "",
        "| figure | p50 | p95 |",
        "|---|---|---|",
        f"| a turn's whole checkpoint work | {turn['turn_p50_ms']:.1f} ms | {turn['turn_p95_ms']:.1f} ms |",
        f"| the snapshot before a prompt | {turn['before_p50_ms']:.1f} ms | {turn['before_p95_ms']:.1f} ms |",
        *(
            [f"| a turn's CPU (bench + git) | {turn['turn_cpu_p50_ms']:.1f} ms | |"]
            if "turn_cpu_p50_ms" in turn
            else []
        ),
        "",
        "| first delta | checkpoints on | off | added | noise (off's interquartile range) |",
        "|---|---|---|---|---|",
        f"| median of {delta['trials']} | {delta['on_ms']:.1f} ms | {delta['off_ms']:.1f} ms | "
        f"{delta['added_ms']:+.1f} ms | {delta['noise_ms']:.1f} ms |",
        "",
        "The turn's first tool is where the snapshot's cost shows: it waits for it. The same two",
        "bridges alternate a `tool` turn (bash `echo hi`), tool.call read → first tool.update read:",
        f"on {delta['tool_on_ms']:.1f} ms, off {delta['tool_off_ms']:.1f} ms "
        f"({delta['tool_on_ms'] - delta['tool_off_ms']:+.1f} ms). Section 10's approval runs with",
        "checkpoints off, so that it measures the approval alone.",
        "",
        "`python -m bench.checkpoints [--files N] [--turns N] [--trials N]` runs this section alone.",
    ]
