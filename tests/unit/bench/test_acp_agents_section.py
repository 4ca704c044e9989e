"""The ACP agents' study: medians and the bridge's added cost against direct, the targets judged
from them, `--write` replacing its own section of docs/benchmarks.md and nothing else, and the
scenario found among the models a session offers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.bridge_parts import CATALOG
from bench.report.acp_agents_section import HEADING, medians, replace_section, rows, section
from bench.suites.studies.acp_agents import own_shares, scenario_value


def _trial(
    follow_up_ms: float, cancel_ms: float, left: int = 0, own: tuple[float, float] | None = None
) -> dict[str, float]:
    trial = {"follow_up": follow_up_ms / 1000, "cancel": cancel_ms / 1000, "left": float(left)}
    if own is not None:  # the bridge's own share of each, read off its trace
        trial |= {"own_follow_up": own[0] / 1000, "own_cancel": own[1] / 1000}
    return trial


RESULTS = {
    "pi-acp": {
        "direct": [_trial(50, 40), _trial(60, 45), _trial(70, 100, left=1)],
        "acp": [_trial(52, 10), _trial(62, 12), _trial(99, 11)],
        "lsp": [_trial(80, 10), _trial(81, 12), _trial(82, 11)],
    }
}


def test_medians_and_targets_are_judged_against_the_direct_run() -> None:
    figures = medians(RESULTS)["pi-acp"]
    assert figures["direct"] == {"follow_up_ms": 60.0, "cancel_ms": 45.0, "left": 1.0, "n": 3.0}
    assert figures["acp"]["follow_up_ms"] == 62.0
    direct, acp, lsp = rows("pi-acp", figures)
    assert direct[-1] == "baseline"
    # +2 ms on the follow-up, a faster cancel, nothing left: met
    assert (acp[1], acp[3], acp[4], acp[6], acp[9]) == ("`pi-bridge acp`", "+2.0 ms", "—", "-34.0 ms", "yes")
    # +21 ms on the follow-up: over the 3 ms budget
    assert (lsp[3], lsp[9]) == ("+21.0 ms", "NO")
    slow_cancel = {**figures, "acp": {**figures["acp"], "cancel_ms": 46.0}}
    assert rows("pi-acp", slow_cancel)[1][9] == "NO", "a cancel slower than direct misses the target"
    left = {**figures, "acp": {**figures["acp"], "left": 1.0}}
    assert rows("pi-acp", left)[1][9] == "NO", "a process left behind misses the target"


def test_the_follow_up_s_budget_is_judged_on_the_bridge_s_own_share_when_traced() -> None:
    traced = {
        "pi-acp": {
            "direct": [_trial(50, 40), _trial(60, 45)],
            # the agent ran slower under the bridge: +20 ms end to end, 2 ms of it the bridge's
            "acp": [_trial(70, 30, own=(2.0, 0.5)), _trial(80, 30, own=(2.2, 0.7))],
            "lsp": [_trial(55, 30, own=(3.5, 0.5)), _trial(56, 30, own=(3.7, 0.5))],
        }
    }
    figures = medians(traced)["pi-acp"]
    assert (
        round(figures["acp"]["own_follow_up_ms"], 6) == 2.1
        and round(figures["acp"]["own_cancel_ms"], 6) == 0.6
    )
    _, acp, lsp = rows("pi-acp", figures)
    assert (acp[3], acp[4], acp[7], acp[9]) == ("+20.0 ms", "2.10 ms", "0.60 ms", "yes")
    assert (lsp[3], lsp[4], lsp[9]) == ("+0.5 ms", "3.60 ms", "NO"), "its own 3.6 ms is over the budget"


DOC = """# Benchmarks

## 14. Traced

kept fourteen

## Reproducing and profiling

kept last
"""


def test_write_adds_then_replaces_its_own_section_only() -> None:
    lines = section(
        RESULTS,
        None,
        command="python -m bench acp_agents --trials 3 --write",
        trials=3,
        load=(0.1, 0.2),
        cpus=2,
        pause=2.0,
    )
    assert lines[0].startswith(HEADING)
    assert "python -m bench acp_agents --trials 3 --write" in lines
    added = replace_section(DOC, lines)
    assert added.index("kept fourteen") < added.index(HEADING) < added.index("## Reproducing")
    assert added.count(HEADING) == 1 and "| pi-acp | LSP front |" in added
    again = section(
        {"pi-acp": {**RESULTS["pi-acp"], "lsp": []}},
        None,
        command="again",
        trials=3,
        load=(0, 0),
        cpus=2,
        pause=2.0,
    )
    replaced = replace_section(added, again)
    assert replaced.count(HEADING) == 1
    assert "again" in replaced and "--trials 3 --write" not in replaced
    assert "| pi-acp | LSP front |" not in replaced, "the old table went with its section"
    # every other byte of the file is as it was
    assert replaced == DOC.replace("## Reproducing", "\n".join(again).rstrip() + "\n\n## Reproducing", 1)
    assert replace_section("# Benchmarks\n", lines).endswith("\n".join(lines).rstrip("\n") + "\n")


def test_the_scenario_is_found_among_the_models_each_side_offers() -> None:
    pi_acp = CATALOG["pi-acp"]

    def offered(*choices: dict[str, Any]) -> dict[str, Any]:
        return {"sessionId": "s", "configOptions": [{"id": "model", "options": list(choices)}]}

    flat = offered({"value": "fake/text"}, {"value": "fake/shell"})
    assert scenario_value(pi_acp, flat) == "fake/shell"
    grouped = offered({"group": "g", "options": [{"value": "other/text"}, {"value": "other/shell"}]})
    assert scenario_value(pi_acp, grouped) == "other/shell"
    assert scenario_value(pi_acp, {"sessionId": "s"}) == "fake/shell", "the catalog's spelling"


def test_the_bridge_s_own_share_is_read_off_its_trace(tmp_path: Path) -> None:
    ns = 1_000_000  # a millisecond
    marks = [
        ("client.in", 100 * ns),
        ("engine.prompt", 102 * ns),  # the prompt written: 2 ms after the client sent it
        ("agent.out", 110 * ns),  # an update that is not the chunk
        ("agent.out", 120 * ns),  # the chunk's line, read back to the client 0.5 ms later
        ("client.out", 120 * ns + ns // 2),
        ("cancel.token", 201 * ns),  # the cancel's first stage, 1 ms after it was sent
        ("agent.answered", 209 * ns),  # the agent's own 8 ms
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(marks))
    times = {
        "follow_up_sent": 0.100,
        "follow_up_first": 0.1205,
        "cancel_sent": 0.200,
        "cancel_answered": 0.2105,
    }
    shares = own_shares(trace, times)
    assert round(shares["own_follow_up"] * 1000, 6) == 2.5
    assert round(shares["own_cancel"] * 1000, 6) == 2.5
    assert own_shares(tmp_path / "absent.json", times, wait=0) == {}, "no trace: no share, not a wrong one"
