"""The permission gate's rows and section of docs/benchmarks.md (bench/suites/gate.py), and the stored
figures of the last `python -m bench commits` (bench/.cache/results-commits.json)."""

from __future__ import annotations

import json
from typing import Any

from bench.common import CACHE

R = dict[str, Any]
#: The targets of issue #22: a `full` turn's added cost, and one approval beyond the client's answer.
FULL_TARGET_MS = 1.0
APPROVAL_TARGET_MS = 3.0
COMMITS_RESULTS = CACHE / "results-commits.json"


def _approval_extra(app: R) -> float:
    """One approval's cost beyond the client's answer, from the segment that holds it."""
    tool = app["tool"]
    extra: float = tool["ask_ms"] - tool["full_ms"] - app["client_answer_ms"]
    return extra


def gate_rows(res: R) -> list[list[str]]:
    """The summary table's rows: the two figures against their targets."""
    g = res.get("gate")
    if not g:
        return []
    hook, app = g["extension"]["hook"], g["approval"]
    extra = _approval_extra(app)
    return [
        [
            "Permission gate, `full` mode: a tool call with the bridge's pi extension loaded "
            "(tool start → first output)",
            f"{hook['with_ms']:.2f} ms",
            f"without it {hook['without_ms']:.2f} ms",
            f"{hook['added_ms']:+.2f} ms",
            f"≤ {FULL_TARGET_MS:.0f} ms added",
            "yes" if hook["added_ms"] <= FULL_TARGET_MS else "NO",
        ],
        [
            "Permission gate: one approval, beyond the client's own answer time",
            f"{extra:.2f} ms",
            f"`full` turn {app['tool']['full_ms']:.2f} ms, client {app['client_answer_ms']:.3f} ms",
            "—",
            f"≤ {APPROVAL_TARGET_MS:.0f} ms",
            "yes" if extra <= APPROVAL_TARGET_MS else "NO",
        ],
    ]


def gate_section(g: R, command: str) -> list[str]:
    """Section 10: how the gate's two figures are measured, and all of them."""
    ext, app = g["extension"], g["approval"]
    tool, text, hook, pi_ask = ext["tool"], ext["text"], ext["hook"], ext["pi_ask"]
    extra = _approval_extra(app)
    bridge_only = extra - pi_ask["pi_ms"]
    rows = [
        [
            "`tool` turn (bash `echo hi`): prompt → agent_settled",
            f"{tool['with_ms']:.2f} ms",
            f"{tool['without_ms']:.2f} ms",
            f"{tool['added_ms']:+.2f} ms (paired {tool['paired_ms']:+.2f})",
        ],
        [
            "`text` turn: prompt → agent_settled",
            f"{text['with_ms']:.2f} ms",
            f"{text['without_ms']:.2f} ms",
            f"{text['added_ms']:+.2f} ms (paired {text['paired_ms']:+.2f})",
        ],
        [
            "in the `tool` turn: tool_execution_start → first tool_execution_update",
            f"{hook['with_ms']:.2f} ms",
            f"{hook['without_ms']:.2f} ms",
            f"{hook['added_ms']:+.2f} ms (paired {hook['paired_ms']:+.2f})",
        ],
    ]
    approval_rows = [
        [
            "`tool` turn: pi/run → answered",
            f"{app['turn']['ask_ms']:.2f} ms",
            f"{app['turn']['full_ms']:.2f} ms",
            f"{app['turn']['ask_ms'] - app['turn']['full_ms']:+.2f} ms",
        ],
        [
            "in the turn: `tool.call` read → first `tool.update` read",
            f"{app['tool']['ask_ms']:.2f} ms",
            f"{app['tool']['full_ms']:.2f} ms",
            f"{app['tool']['ask_ms'] - app['tool']['full_ms']:+.2f} ms",
        ],
    ]
    return [
        "## 10. Permission gate: the pi extension in `full` mode, and one approval (`bench/suites/gate.py`)",
        "",
        f"Part of `{command}`; alone: `python -m bench gate --turns {ext['trials']} --approvals "
        f"{app['trials']}`. Real pi 1.6.0 and the scripted model; medians of {ext['trials']} and "
        f'{app["trials"]} alternating trials after one unmeasured turn of each kind; "paired" is '
        "the median of the per-trial differences.",
        "",
        "**The extension in `full` mode.** Two live pis started directly with the argv the bridge "
        "gives a live pi (`rpc_launch_spec`) and the same environment, `PI_BRIDGE_GATE_DIR` "
        "included (an empty directory: no mode file, so `full`); the baseline leaves out the "
        "trailing `-e <extension>`, nothing else. The bridge has no switch to start pi without "
        "its extension, and needs none here: in `full` mode it takes no part in a tool call. "
        "The extension's only per-turn work is its `tool_call` handler, which pi runs between "
        "`tool_execution_start` and the tool's start; that segment is the figure judged against "
        "the target. Whole turns are shown too: on this shared 2-core machine their spread "
        "(the scripted model's streaming, bash's spawn) is wider than the target, and the "
        "extension runs nothing in a `text` turn, so that row's difference is this "
        "measurement's own noise.",
        "",
        *_rows_table(rows, ["figure", "with the extension", "without", "added"]),
        "",
        "**One approval.** The bridge's LSP front, rpc engine, with a client that declares "
        "`experimental.piBridge.permissions` and answers each `pi/requestPermission` `allow-once` "
        "on its reader thread as soon as the request is read. One conversation alternates the "
        "`tool` turn with `mode: ask` (one approval) and `mode: full` (none). The client times its "
        f"own part (request read → answer written): median {app['client_answer_ms']:.3f} ms, max "
        f"{app['client_answer_max_ms']:.3f} ms. One approval beyond it = the segment's `ask` "
        f"median minus its `full` median minus the client's = **{extra:.2f} ms** (target ≤ "
        f"{APPROVAL_TARGET_MS:.0f} ms).",
        "",
        *_rows_table(approval_rows, ["figure", "`ask` (one approval)", "`full`", "difference"]),
        "",
        "Of that, pi's own part of a dialog (the gate's `input` out over rpc and the answer back "
        "in, no bridge between: a third live pi whose mode file says `ask`, answered by the "
        f"benchmark's rpc client at once): {pi_ask['ask_ms']:.2f} ms for the same segment, less "
        f"the `full` one and the client's {pi_ask['client_answer_ms']:.3f} ms = "
        f"{pi_ask['pi_ms']:.2f} ms. The bridge's own part is the rest, {bridge_only:.2f} ms: "
        "reading the dialog, the mode and rules check, `permission.requested`, the LSP request "
        "out and its answer in, `permission.resolved`, and the answer line to pi.",
        "",
        *_first_approval(app),
    ]


def _first_approval(app: R) -> list[str]:
    """The bridge's first approval, left out of the trials (older runs did not keep it)."""
    if "first_ask_tool_ms" not in app:
        return []
    return [
        "The bridge's first approval (its conversation's first `ask` turn, before the trials), "
        f"`tool.call` read → first `tool.update` read: {app['first_ask_tool_ms']:.2f} ms. What a "
        "first checked tool call would build (the rules' shell parser) is built while the spare "
        "pi boots.",
        "",
    ]


def _rows_table(rows: list[list[str]], header: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


_FIGURE_NAMES = {
    "next_prompt_first": "next prompt, first message",
    "first_prompt_first": "first prompt, first message",
    "next_prompt_total": "next prompt, total",
    "cancel_mid_tool": "cancel mid-tool",
}


def commits_section() -> list[str]:
    """Section 11: the last `python -m bench commits` run's medians, as it stored them."""
    try:
        stored = json.loads(COMMITS_RESULTS.read_text())
    except (OSError, ValueError):
        return []
    rows = [
        [
            _FIGURE_NAMES.get(name, name),
            f"{f['before_ms']:.2f}",
            f"{f['after_ms']:.2f}",
            f"{f['after_ms'] / f['before_ms']:.2f}x",
        ]
        for name, f in stored["figures"].items()
    ]
    return [
        "## 11. Two commits of the bridge, alternating (`bench/suites/studies/commits.py`)",
        "",
        "Stored figures, not from the invocation above: written by",
        "",
        "```",
        stored["command"],
        "```",
        "",
        f"on {stored['when']}: bench/suites/studies/conversation.py's rpc-engine trial (spare pi, first "
        "prompt, 5 "
        f"consecutive prompts, cancel mid-tool) on each commit's bridge, {stored['trials']} "
        "trials alternating, medians in ms.",
        "",
        *_rows_table(rows, ["figure (ms)", stored["before"], stored["after"], "ratio"]),
        "",
    ]
