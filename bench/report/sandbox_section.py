"""The trust layer's rows and sections of docs/benchmarks.md: the sandbox (bench/suites/sandbox.py) and
the bridge's file operations (bench/suites/file_ops.py)."""

from __future__ import annotations

from typing import Any

from bench.suites.file_ops import TARGET_MS as FILE_OP_TARGET_MS
from bench.suites.sandbox import TARGET_MS

R = dict[str, Any]


def sandbox_rows(res: R) -> list[list[str]]:
    """The summary table's rows: one sandboxed bash call of pi against an unsandboxed one, and a
    read and a write through the bridge against pi's own."""
    return _sandbox_row(res) + _file_op_rows(res)


def _file_op_rows(res: R) -> list[list[str]]:
    f = res.get("file_ops")
    if not f:
        return []
    return [
        [
            f"File ops: pi's {op} through the bridge's policy, tool.call → tool.completed (median)",
            f"{f[op]['with_ms']:.2f} ms",
            f"pi's own {f[op]['without_ms']:.2f} ms",
            f"{f[op]['added_ms']:+.2f} ms",
            f"≤ {FILE_OP_TARGET_MS:g} ms added",
            "yes" if f[op]["added_ms"] <= FILE_OP_TARGET_MS else "NO",
        ]
        for op in ("read", "write")
    ]


def file_ops_section(f: R, command: str) -> list[str]:
    """Section 13: how the file operations' figures are measured, and both of them."""
    lines = [
        "## 13. File operations: pi's read and write through the bridge against pi's own "
        "(`bench/suites/file_ops.py`)",
        "",
        f"Part of `{command}`; alone: `python -m bench file_ops --samples {f['read']['samples']}`. Two "
        "bridges on one scripted model, one `full` conversation each; one hands every file operation "
        "of pi's tools to the bridge (judged by its path policy, done with `openat` and `O_NOFOLLOW`), "
        "the other runs pi with `PI_BRIDGE_FS_LOCAL=1` (pi's own operations). Each turn is ten reads "
        "or ten writes of a small workspace file; a sample is one call, `tool.call` → "
        "`tool.completed` on the client. Turns alternate between the bridges; medians.",
        "",
        "| Op | Through the bridge | pi's own | Added |",
        "|---|---|---|---|",
    ]
    for op in ("read", "write"):
        o = f[op]
        lines.append(f"| {op} | {o['with_ms']:.2f} ms | {o['without_ms']:.2f} ms | {o['added_ms']:+.2f} ms |")
    return [*lines, ""]


def _sandbox_row(res: R) -> list[list[str]]:
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
        "## 12. Sandbox: one sandboxed bash call against an unsandboxed one (`bench/suites/sandbox.py`)",
        "",
        f"Part of `{command}`; alone: `python -m bench sandbox --trials {s['pi']['trials']}`. Medians "
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
