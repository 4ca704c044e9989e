"""The Neovim plugin's require graph: no cycle, and core/ never requires ui/ nor draws.

Every `require` of a pi_bridge module in code counts, the ones inside functions and v:lua strings
too: a require deferred into a function hides a cycle from Lua's loader, not from the design.
"""

from __future__ import annotations

import re
from pathlib import Path

LUA_ROOT = Path(__file__).resolve().parents[3] / "editors" / "nvim" / "lua"

# require('m'), require("m"), require 'm', require'm' (the last as in a v:lua expression).
REQUIRE = re.compile(r"""\brequire\s*\(?\s*['"](pi_bridge(?:\.[\w]+)*)['"]""")
COMMENT_LINE = re.compile(r"^\s*--.*$", re.MULTILINE)


def module_name(root: Path, path: Path) -> str:
    """The module `require` loads from `path` (an init.lua is its folder's module)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "init":
        parts.pop()
    return ".".join(parts)


def require_graph(root: Path) -> dict[str, set[str]]:
    """Each pi_bridge module under `root` with the other pi_bridge modules its code requires."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.lua")):
        code = COMMENT_LINE.sub("", path.read_text(encoding="utf-8"))
        name = module_name(root, path)
        graph[name] = set(REQUIRE.findall(code)) - {name}  # itself, as in a v:lua foldexpr
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` requires, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two modules or more, each sorted, in order."""
    reach = {node: reachable(graph, node) for node in graph}
    components = {
        frozenset({node} | {other for other in reach[node] if node in reach.get(other, ())}) for node in graph
    }
    return sorted(sorted(c) for c in components if len(c) > 1)


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Requires from pi_bridge.core into anything outside core (the UI or the top module)."""
    return sorted(
        (mod, dep)
        for mod, deps in graph.items()
        if mod.startswith("pi_bridge.core.")
        for dep in deps
        if not dep.startswith("pi_bridge.core.")
    )


def write(root: Path, files: dict[str, str]) -> Path:
    """Lay out made-up plugin modules under `root`."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_plugin_has_no_require_cycle() -> None:
    graph = require_graph(LUA_ROOT)
    assert "pi_bridge.core.client" in graph and "pi_bridge.ui.chat" in graph
    assert cycles(graph) == []


def test_core_requires_nothing_of_the_ui() -> None:
    assert upward(require_graph(LUA_ROOT)) == []


def test_core_does_no_buffer_or_window_work() -> None:
    ui_calls = re.compile(r"nvim_(buf|win|tabpage)_|vim\.(bo|wo|ui|cmd)\b|nvim_(list_bufs|create_autocmd)")
    core = LUA_ROOT / "pi_bridge" / "core"
    found = {
        f"{path.name}:{n}": line.strip()
        for path in sorted(core.glob("*.lua"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ui_calls.search(line) and not line.lstrip().startswith("--")
    }
    assert found == {}


def test_every_required_module_exists() -> None:
    graph = require_graph(LUA_ROOT)
    missing = sorted((mod, dep) for mod, deps in graph.items() for dep in deps if dep not in graph)
    assert missing == []


def test_no_folder_of_the_plugin_holds_more_than_twelve_lua_files() -> None:
    nvim = LUA_ROOT.parent
    folders = {p.parent for p in nvim.rglob("*.lua") if ".cache" not in p.relative_to(nvim).parts}
    crowded = {str(f): n for f in folders if (n := len(list(f.glob("*.lua")))) > 12}
    assert crowded == {}


def test_a_cycle_hidden_in_functions_is_named(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pi_bridge/init.lua": "local a = require('pi_bridge.core.a')\n",
            "pi_bridge/core/a.lua": "local function f() return require 'pi_bridge.ui.b' end\n",
            "pi_bridge/ui/b.lua": "vim.o.omnifunc = \"v:lua.require'pi_bridge.ui.c'.f\"\n",
            "pi_bridge/ui/c.lua": 'local function g() return require("pi_bridge.core.a") end\n',
            "pi_bridge/ui/d.lua": "-- require('pi_bridge') in a comment\nrequire('pi_bridge.ui.e')\n",
            "pi_bridge/ui/e.lua": "local M = {}\nM.go = function() require('pi_bridge.ui.d') end\n",
        },
    )
    graph = require_graph(root)
    assert cycles(graph) == [
        ["pi_bridge.core.a", "pi_bridge.ui.b", "pi_bridge.ui.c"],
        ["pi_bridge.ui.d", "pi_bridge.ui.e"],
    ]
    assert upward(graph) == [("pi_bridge.core.a", "pi_bridge.ui.b")]


def test_a_graph_without_cycle_passes(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pi_bridge/init.lua": "require('pi_bridge.ui.b')\nrequire('pi_bridge.core.a')\n",
            "pi_bridge/core/a.lua": "return {}\n",
            "pi_bridge/ui/b.lua": "local function f() return require('pi_bridge.core.a') end\n",
        },
    )
    graph = require_graph(root)
    assert graph["pi_bridge"] == {"pi_bridge.ui.b", "pi_bridge.core.a"}
    assert cycles(graph) == [] and upward(graph) == []
