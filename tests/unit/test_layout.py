"""The import audit of bridge/: the layers of design/layout.md, no circle, no arrow back up.

Every `import` and `from ... import` of every module under bridge/ is read with `ast` (those inside
functions too: a lazy import is still an arrow). The layers, from the top down:

    cli, tools -> fronts -> runs -> checkpoints -> policy -> editor -> engines -> agents -> process
        -> config, contract, scripted_model

A module may import its own layer and the layers below, never one above. On top of that a front
sees runs/, policy/, editor/, config and the contract only; policy and checkpoints see a run
through policy/run_view.py, the seam and the cancel token, never an engine or agent package; an engine sees the seam, never the agents index or an
agent's own package; the two agent packages never import each other; process/ imports only itself
and the contract (its receipt is the wire's), and the contract imports nothing of bridge. A failure names each offending import by file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.env import ROOT

BRIDGE = ROOT / "bridge"

# Top first. A module's layer is the first entry its dotted name starts with.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bridge.__main__", "bridge.cli"),
    ("bridge.tools",),
    ("bridge.fronts",),
    ("bridge.runs",),
    ("bridge.checkpoints",),
    ("bridge.policy",),
    ("bridge.editor",),
    ("bridge.engines",),
    ("bridge.agents",),
    ("bridge.process",),
    ("bridge.config", "bridge.contract", "bridge.scripted_model"),
)

# All that a layer may import of bridge (besides `bridge` itself, the package's version).
ONLY: dict[str, tuple[str, ...]] = {
    "bridge.fronts": (
        "bridge.fronts",
        "bridge.runs",
        "bridge.policy",
        "bridge.editor",
        "bridge.config",
        "bridge.contract",
    ),
    "bridge.process": ("bridge.process", "bridge.contract"),
    # Checkpoints: the shadow git and a run as policy sees it.
    "bridge.checkpoints": (
        "bridge.checkpoints",
        "bridge.policy.run_view",
        "bridge.process",
        "bridge.config",
        "bridge.contract",
    ),
    # The agent-neutral policies: below runs (a run is policy/run_view.py), above the engines.
    "bridge.policy": (
        "bridge.policy",
        "bridge.editor",
        "bridge.engines.cancel",
        "bridge.agents.seam",
        "bridge.agents.values",
        "bridge.process",
        "bridge.config",
        "bridge.contract",
    ),
    # The editor's hands: what a front's editor answers, and the cancel token of a command.
    "bridge.editor": (
        "bridge.editor",
        "bridge.engines.cancel",
        "bridge.agents.seam",
        "bridge.agents.values",
        "bridge.contract",
    ),
    # Pure path policy: no agent, no run.
    "bridge.policy.file_access": (
        "bridge.policy.file_access",
        "bridge.process",
        "bridge.config",
        "bridge.contract",
    ),
    "bridge.contract": (),
}
# What a layer must never import, though it lies below: `bridge.agents` is the index alone (its
# __init__.py), a deeper name is that whole package.
NEVER: dict[str, tuple[str, ...]] = {
    "bridge.engines": ("bridge.agents", "bridge.agents.pi", "bridge.agents.claude"),
    "bridge.agents.pi": ("bridge.agents", "bridge.agents.claude"),
    "bridge.agents.claude": ("bridge.agents", "bridge.agents.pi"),
}


@dataclass(frozen=True)
class Arrow:
    """One import of one bridge module by another."""

    source: str
    target: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.source} -> {self.target}"


def module_name(path: Path) -> str:
    """The dotted name of a file under bridge/."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of bridge/, by dotted name."""
    return {module_name(path): path for path in sorted(BRIDGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module a dotted import name lands on (a name imported from a module is that module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def arrows(modules: dict[str, Path]) -> Iterator[Arrow]:
    """Every import between two bridge modules, as the code writes it."""
    for source, path in modules.items():
        seen: set[tuple[str, int]] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        file = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                if not name.startswith("bridge"):
                    continue
                target = _resolve(name, modules)
                if target and target != source and (target, node.lineno) not in seen:
                    seen.add((target, node.lineno))
                    yield Arrow(source, target, file, node.lineno)


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _forbidden(name: str, entries: tuple[str, ...]) -> bool:
    """Whether `name` is a NEVER entry: the index exactly, or inside an agent's package."""
    return any(
        name == entry or (entry != "bridge.agents" and name.startswith(entry + ".")) for entry in entries
    )


def layer(name: str) -> int:
    """0 for the top layer; a module outside every layer (the bridge package itself) is the ground."""
    for index, prefixes in enumerate(LAYERS):
        if _in(name, prefixes):
            return index
    return len(LAYERS)


def _rule_of(table: dict[str, tuple[str, ...]], name: str) -> tuple[str, ...] | None:
    matches = [key for key in table if name == key or name.startswith(key + ".")]
    return table[max(matches, key=len)] if matches else None


def broken_rules(found: list[Arrow]) -> list[str]:
    """Each arrow that runs back up, leaves a front's view, or crosses a NEVER line."""
    broken = []
    for arrow in found:
        if arrow.target == "bridge":
            continue
        if layer(arrow.target) < layer(arrow.source):
            broken.append(f"runs back up: {arrow}")
        only = _rule_of(ONLY, arrow.source)
        if only is not None and not _in(arrow.target, only):
            broken.append(f"outside what {arrow.source} may see: {arrow}")
        never = _rule_of(NEVER, arrow.source)
        if never is not None and _forbidden(arrow.target, never):
            broken.append(f"crosses the seam: {arrow}")
    return broken


class _Tarjan:
    """Strongly connected components of the import graph: each one of more than one module is a circle."""

    def __init__(self, edges: dict[str, set[str]]) -> None:
        self.edges = edges
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.circles: list[list[str]] = []

    def run(self) -> list[list[str]]:
        for node in sorted(self.edges):
            if node not in self.index:
                self._visit(node)
        return self.circles

    def _visit(self, node: str) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        for other in sorted(self.edges.get(node, ())):
            if other not in self.index:
                self._visit(other)
                self.low[node] = min(self.low[node], self.low[other])
            elif other in self.on_stack:
                self.low[node] = min(self.low[node], self.index[other])
        if self.low[node] == self.index[node]:
            component = []
            while True:
                member = self.stack.pop()
                self.on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                self.circles.append(sorted(component))


def circles(found: list[Arrow]) -> list[list[str]]:
    """The import circles among bridge's modules."""
    edges: dict[str, set[str]] = {}
    for arrow in found:
        edges.setdefault(arrow.source, set()).add(arrow.target)
    return _Tarjan(edges).run()


def test_every_module_belongs_to_a_layer_folder() -> None:
    unplaced = [name for name in all_modules() if name != "bridge" and layer(name) == len(LAYERS)]
    assert unplaced == [], "a new module needs a layer in LAYERS"


def test_no_import_runs_back_up_or_crosses_a_layer_rule() -> None:
    assert broken_rules(list(arrows(all_modules()))) == []


def test_there_is_no_import_circle() -> None:
    assert circles(list(arrows(all_modules()))) == []


def test_the_audit_catches_each_kind_of_violation() -> None:
    """The rules are not vacuous: a made-up arrow of each kind is named."""
    bad = [
        Arrow("bridge.process.spawn", "bridge.runs.registry", "p.py", 1),
        Arrow("bridge.fronts.acp.agent", "bridge.engines.live.conversations", "f.py", 2),
        Arrow("bridge.engines.live.live_attempt", "bridge.agents.pi.live", "e.py", 3),
        Arrow("bridge.engines.live.live_attempt", "bridge.agents", "e.py", 4),
        Arrow("bridge.agents.pi.mapper", "bridge.agents.claude.mapper", "m.py", 5),
    ]
    broken = broken_rules(bad)
    for arrow in bad:
        assert any(str(arrow) in line for line in broken), arrow
    assert broken_rules([Arrow("bridge.engines.live.live_attempt", "bridge.agents.seam", "e.py", 6)]) == []
    assert circles([Arrow("bridge.a", "bridge.b", "a.py", 1), Arrow("bridge.b", "bridge.a", "b.py", 1)]) == [
        ["bridge.a", "bridge.b"]
    ]


#: The most modules a folder of the house holds (its __init__.py not counted), and the most lines a
#: class runs to: a room past either wants a cut.
MAX_ROOMS = 12
MAX_CLASS_LINES = 400
#: The folders of source the house is drawn from (tests and fixtures are not rooms).
HOUSE = ("bridge", "bench", "editors/nvim/lua", "editors/vscode/src", "editors/vim")
SOURCE_SUFFIXES = (".py", ".lua", ".ts", ".vim")


def crowded_folders(root: Path) -> dict[str, int]:
    """Each folder under the house that holds more than MAX_ROOMS modules, with its count."""
    counts: dict[str, int] = {}
    for base in HOUSE:
        for path in (root / base).rglob("*"):
            skipped = {"node_modules", "__pycache__", ".cache", "generated"} & set(path.parts)
            if path.suffix in SOURCE_SUFFIXES and path.name != "__init__.py" and not skipped:
                folder = str(path.parent.relative_to(root))
                counts[folder] = counts.get(folder, 0) + 1
    return {folder: count for folder, count in counts.items() if count > MAX_ROOMS}


def long_classes(root: Path) -> list[str]:
    """Each Python class of bridge/ and bench/ over MAX_CLASS_LINES lines, as file:name (lines)."""
    found = []
    for base in ("bridge", "bench"):
        for path in sorted((root / base).rglob("*.py")):
            if ".cache" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_CLASS_LINES:
                        found.append(f"{path.relative_to(root)}:{node.name} ({lines})")
    return found


def test_no_folder_holds_more_than_twelve_modules() -> None:
    assert crowded_folders(ROOT) == {}


def test_no_class_runs_over_four_hundred_lines() -> None:
    assert long_classes(ROOT) == []


def test_the_room_audits_are_not_vacuous(tmp_path: Path) -> None:
    """A made-up folder of thirteen modules and a made-up class of 401 lines are named."""
    crowded = tmp_path / "bridge" / "crowded"
    crowded.mkdir(parents=True)
    for index in range(MAX_ROOMS + 1):
        (crowded / f"m{index}.py").write_text("")
    (crowded / "__init__.py").write_text("")
    assert crowded_folders(tmp_path) == {"bridge/crowded": MAX_ROOMS + 1}
    body = "\n".join("    x = 1" for _ in range(MAX_CLASS_LINES))
    (crowded / "m0.py").write_text(f"class Big:\n{body}\n")
    assert long_classes(tmp_path) == [f"bridge/crowded/m0.py:Big ({MAX_CLASS_LINES + 1})"]
