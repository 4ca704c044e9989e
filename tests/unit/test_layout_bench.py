"""The import audit of bench/: what of bridge it may see, nothing of tests/, no circle, small folders.

Every import of every module under bench/ is read with `ast`, those inside functions too. bench/
drives the bridge from outside, so it sees the public surface only (PUBLIC); the internals a
benchmark measures directly are imported by bench/bridge_parts.py alone, and only those of PARTS.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from bench.suites import find
from tests.support.env import ROOT
from tests.unit.test_layout import Arrow, all_modules, circles, module_name

BENCH = ROOT / "bench"
PARTS_MODULE = "bench.bridge_parts"
MAX_MODULES_PER_FOLDER = 12

# What any module of bench/ may import of bridge, and why it is public. An entry is that module
# and the modules under it, except `bridge.agents`: the index alone, not an agent's package.
PUBLIC: dict[str, str] = {
    "bridge.tools.stdio_client": "the one client-side stdio peer every client of the bridge uses",
    "bridge.contract": "the wire's models",
    "bridge.config": "the bridge's settings",
    "bridge.scripted_model": "the offline model every benchmark runs against",
    "bridge.agents": "the agents' index: build_adapter(name), how a front picks an agent",
    "bridge.agents.seam": "the seam's protocols: what every agent answers",
    "bridge.agents.values": "the values that cross the seam (launch specs, run options, the gate's env)",
}
EXACT = ("bridge.agents",)
# The internals bench/bridge_parts.py may import: each is what a benchmark measures directly.
PARTS: dict[str, str] = {
    "bridge.policy.sandbox": "the sandbox board and confinement whose cost bench/suites/sandbox.py measures",
    "bridge.policy.gate": "the mode board the gate and sandbox suites set a conversation's mode with",
    "bridge.policy.approvals": "the allow-once answer the gate suite's client gives",
    "bridge.policy.rule_store": "the state dir's variable, so a suite's rules and checkpoints stay in its temp dir",
    "bridge.checkpoints.shadow_git": "the shadow repository whose snapshots bench/suites/checkpoints.py times",
    "bridge.process.bwrap": "the bwrap prefix the sandbox suite's spawn figure runs behind",
    "bridge.process.seccomp": "the seccomp filter of that prefix",
    "bridge.agents.acp.catalog": "the ACP agents the acp_agents study drives, each directly and through the bridge",
    "bridge.agents.pi.session_paths": "pi's session folder, where the history study writes its sessions",
}


def bench_modules(root: Path = BENCH) -> dict[str, Path]:
    """Every module of bench/ (its cache left out), by dotted name."""
    return {
        module_name(path): path
        for path in sorted(root.rglob("*.py"))
        if ".cache" not in path.relative_to(root).parts
    }


def _resolve(name: str, modules: dict[str, Path] | set[str]) -> str:
    """The module a dotted import name lands on (a name imported from a module is that module)."""
    found = name
    while found and found not in modules:
        found = found.rpartition(".")[0]
    return found or name


def imports(modules: dict[str, Path]) -> Iterator[Arrow]:
    """Every import of bench, bridge or tests by a module of `modules`, as the code writes it."""
    known = set(modules) | set(all_modules())
    for source, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        file = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                if name.split(".")[0] in ("bench", "bridge", "tests"):
                    target = _resolve(name, known)
                    if target != source:
                        yield Arrow(source, target, file, node.lineno)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or (prefix not in EXACT and name.startswith(prefix + "."))


def broken_rules(found: list[Arrow]) -> list[str]:
    """Each import of bridge outside PUBLIC (or PARTS, in bridge_parts), and each import of tests."""
    broken = []
    for arrow in found:
        target = arrow.target
        public = target == "bridge" or any(_under(target, prefix) for prefix in PUBLIC)
        if target.split(".")[0] == "tests":
            broken.append(f"imports tests/: {arrow}")
        elif target.split(".")[0] != "bridge" or public:
            continue
        elif arrow.source != PARTS_MODULE:
            broken.append(f"a bridge internal outside {PARTS_MODULE}: {arrow}")
        elif not any(_under(target, prefix) for prefix in PARTS):
            broken.append(f"an internal not in PARTS: {arrow}")
    return broken


def crowded_folders(modules: dict[str, Path]) -> dict[str, int]:
    """The folders holding more than MAX_MODULES_PER_FOLDER modules (__init__.py not counted)."""
    counts: dict[str, int] = {}
    for path in modules.values():
        if path.name != "__init__.py":
            folder = str(path.parent.relative_to(ROOT))
            counts[folder] = counts.get(folder, 0) + 1
    return {folder: count for folder, count in counts.items() if count > MAX_MODULES_PER_FOLDER}


def test_bench_imports_only_the_bridges_public_surface_and_no_test() -> None:
    assert broken_rules(list(imports(bench_modules()))) == []


def test_bench_has_no_import_circle() -> None:
    bench_only = [arrow for arrow in imports(bench_modules()) if arrow.target.startswith("bench")]
    assert circles(bench_only) == []


def test_no_bench_folder_holds_more_than_twelve_modules() -> None:
    assert crowded_folders(bench_modules()) == {}


def test_the_bench_audit_fails_on_each_kind_of_violation(tmp_path: Path) -> None:
    """The rules are not vacuous: a made-up import of each kind is named, a real file is read."""
    bad = [
        Arrow("bench.suites.gate", "bridge.runs.registry", "g.py", 1),
        Arrow("bench.suites.gate", "bridge.agents.pi.live", "g.py", 2),
        Arrow("bench.suites.sandbox", "bridge.policy.sandbox", "s.py", 3),
        Arrow(PARTS_MODULE, "bridge.fronts.lsp.server", "p.py", 4),
        Arrow("bench.clients.lsp", "tests.support.lsp", "l.py", 5),
    ]
    broken = broken_rules(bad)
    for arrow in bad:
        assert any(str(arrow) in line for line in broken), arrow
    allowed = [
        Arrow("bench.clients.lsp", "bridge.tools.stdio_client", "l.py", 1),
        Arrow("bench.suites.per_agent", "bridge.agents", "a.py", 2),
        Arrow(PARTS_MODULE, "bridge.policy.sandbox", "p.py", 3),
    ]
    assert broken_rules(allowed) == []
    circle = [Arrow("bench.a", "bench.b", "a.py", 1), Arrow("bench.b", "bench.a", "b.py", 1)]
    assert circles(circle) == [["bench.a", "bench.b"]]
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def later() -> None:\n    from bridge.runs.registry import RunRegistry\n")
    found = list(imports({"bench.lazy": lazy}))
    assert [(arrow.target, arrow.line) for arrow in found] == [("bridge.runs.registry", 2)]
    assert broken_rules(found) != []
    crowded = {f"bench.m{index}": BENCH / f"m{index}.py" for index in range(MAX_MODULES_PER_FOLDER + 1)}
    assert crowded_folders(crowded) == {"bench": MAX_MODULES_PER_FOLDER + 1}


def documented_commands() -> list[tuple[str, str]]:
    """(file, name) of each `python -m bench NAME` and `python -m bench.NAME` in the docs, README and CI."""
    files = [ROOT / "README.md", ROOT / ".ci" / "run", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for path in files:
        for match in re.finditer(r"python -m bench(?:\.| +)([a-z_.]+)", path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), match.group(0)))
    return found


def test_every_documented_bench_command_names_a_runnable_suite() -> None:
    """`python -m bench NAME` finds NAME's module; the old `python -m bench.NAME` is gone."""
    commands = documented_commands()
    assert any(command == "python -m bench commits" for _, command in commands)
    wrong = [
        (file, command)
        for file, command in commands
        if "bench." in command or find(command.split()[-1]) is None
    ]
    assert wrong == []
    assert find("no_such_suite") is None
