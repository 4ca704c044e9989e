"""docs/benchmarks.png: the picture of the first-message and cancel figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

R = dict[str, Any]


def render_chart(res: R, path: Path) -> None:
    """docs/benchmarks.png: time to first message and cancel latency (medians, whisker to the max)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    fm, sbs, ca = res.get("first_message"), res.get("side_by_side"), res.get("cancel")
    labels, values, colors, hatches = [], [], [], []
    if fm:
        labels.append("bridge\ncold")
        values.append(fm["cold"]["first"]["median_ms"])
        colors.append("#1f77b4")
        hatches.append("")
        labels.append("bridge\nwarm" + ("" if fm["pool_active"] else "\n(not yet)"))
        values.append(fm["warm"]["first"]["median_ms"] if fm["pool_active"] else 0.0)
        colors.append("#6baed6")
        hatches.append("" if fm["pool_active"] else "//")
    if sbs:
        labels += ["pi-acp\nfirst prompt", "pi-acp\nsecond prompt"]
        values += [
            sbs["pi_acp"]["first_prompt_first_chunk"] * 1000,
            sbs["pi_acp"]["second_prompt_first_chunk"] * 1000,
        ]
        colors += ["#ff7f0e", "#fdae6b"]
        hatches += ["", ""]
    bars = left.bar(labels, values, color=colors)
    for bar, hatch, value in zip(bars, hatches, values, strict=True):
        bar.set_hatch(hatch)
        left.annotate(
            "not yet" if hatch else f"{value:.0f} ms",
            (bar.get_x() + bar.get_width() / 2, max(value, 1)),
            ha="center",
            va="bottom",
        )
    left.set_ylabel("ms (median)")
    left.set_title("Prompt → first answer chunk\n(adapter running; pi 1.6.0, scripted model)")
    labels, values, maxes, colors = [], [], [], []
    if ca:
        for kind, name in (
            ("stream", "bridge\nmid-stream"),
            ("tool", "bridge\nmid-tool"),
            ("stubborn", "bridge\nignores TERM"),
        ):
            labels.append(name)
            values.append(ca[kind]["median_ms"])
            maxes.append(ca[kind]["max_ms"])
            colors.append("#1f77b4")
    if sbs:
        labels.append("pi-acp\nmid-tool")
        values.append(sbs["pi_acp"]["cancel_mid_tool"] * 1000)
        maxes.append(sbs["pi_acp"]["cancel_mid_tool_max"] * 1000)
        colors.append("#ff7f0e")
    errors = [[0] * len(values), [mx - v for v, mx in zip(values, maxes, strict=True)]]
    bars = right.bar(labels, values, color=colors, yerr=errors, capsize=4)
    for bar, value in zip(bars, values, strict=True):
        right.annotate(
            f"{value:.0f} ms", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom"
        )
    right.set_yscale("log")
    right.set_ylabel("ms (median, whisker = max; log scale)")
    right.set_title("Cancel → answered\n(bridge: warm pool off; no warm variant of cancel)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
