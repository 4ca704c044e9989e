"""The sandbox's row and section of docs/benchmarks.md (bench/sandbox.py)."""

from __future__ import annotations

from typing import Any

from bench.sandbox import TARGET_MS

R = dict[str, Any]


def sandbox_rows(res: R) -> list[list[str]]:
    """The summary table's row: one sandboxed bash call of pi against an unsandboxed one."""
    s = res.get("sandbox")
    if not s:
        return []
    pi = s["pi"]
    return [
        [
            "Sandbox: one bash call of pi in bubblewrap (`workspace-write`, no network), tool start → end",
            f"{pi['with_ms']:.2f} ms",
            f"unsandboxed {pi['without_ms']:.2f} ms",
            f"{pi['added_ms']:+.2f} ms",
            f"≤ {TARGET_MS:.0f} ms added",
            "yes" if pi["added_ms"] <= TARGET_MS else "NO",
        ]
    ]


def sandbox_section(s: R, command: str) -> list[str]:
    """Section 12: how the sandbox's figures are measured, and both of them."""
    lines = [
        "## 12. Sandbox: one sandboxed bash call against an unsandboxed one (`bench/sandbox.py`)",
        "",
        f"Part of `{command}`; alone: `python -m bench.sandbox --trials {s['pi']['trials']}`. Medians "
        "of alternating trials after one unmeasured call each. **pi's bash call**: two live pis "
        "with the bridge's argv and extension, one conversation with a sandbox file written by the "
        "bridge's own board, the other none; `tool_execution_start` → `tool_execution_end` of "
        "bash `echo hi`. **The spawn alone**: a shell that execs `bash -c 'echo hi'`, with and "
        "without the bwrap prefix and its seccomp filter on fd 3 (as the extension runs it), no "
        "pi: the floor of what bubblewrap's namespaces, mounts and filter add.",
        "",
        "| Figure | With the sandbox | Without | Added |",
        "|---|---|---|---|",
    ]
    for key, label in (("pi", "pi's bash call"), ("spawn", "the spawn alone")):
        f = s[key]
        lines.append(
            f"| {label} | {f['with_ms']:.2f} ms | {f['without_ms']:.2f} ms | {f['added_ms']:+.2f} ms |"
        )
    loads = [f"{s[key]['load']:.2f}" for key in ("pi", "spawn") if "load" in s[key]]
    if loads:
        lines += ["", f"1-minute load average as each figure ended: {', '.join(loads)}."]
    return [*lines, ""]
