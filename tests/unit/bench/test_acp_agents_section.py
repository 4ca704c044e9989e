"""The ACP agents' study: medians and the bridge's added cost against direct, the targets judged
from them, `--write` replacing its own section of docs/benchmarks.md and nothing else, and the
scenario found among the models a session offers."""

from __future__ import annotations

from typing import Any

from bench.bridge_parts import CATALOG
from bench.report.acp_agents_section import HEADING, medians, replace_section, rows, section
from bench.suites.studies.acp_agents import scenario_value


def _trial(follow_up_ms: float, cancel_ms: float, left: int = 0) -> dict[str, float]:
    return {"follow_up": follow_up_ms / 1000, "cancel": cancel_ms / 1000, "left": float(left)}


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
    assert (acp[1], acp[3], acp[5], acp[7]) == ("`pi-bridge acp`", "+2.0 ms", "-34.0 ms", "yes")
    # +21 ms on the follow-up: over the 3 ms budget
    assert (lsp[3], lsp[7]) == ("+21.0 ms", "NO")
    slow_cancel = {**figures, "acp": {**figures["acp"], "cancel_ms": 46.0}}
    assert rows("pi-acp", slow_cancel)[1][7] == "NO", "a cancel slower than direct misses the target"
    left = {**figures, "acp": {**figures["acp"], "left": 1.0}}
    assert rows("pi-acp", left)[1][7] == "NO", "a process left behind misses the target"


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
