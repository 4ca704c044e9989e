"""No bridge module reads its process's environment, working directory or argv at import.

Why: a setting read into a module's constant holds the environment of whatever imported the
module first. The bridge reads its knobs (timeouts, limits, the trace) when it uses them, and the
tests' fork server (tests/support/forkserver.py) relies on it: it imports the bridge's modules
once, then forks a bridge per test, each with its own environment.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "bridge"

#: Names whose use at import would read the process's environment, working directory or argv.
READERS = {
    "environ",
    "getenv",
    "getenvb",
    "argv",
    "getcwd",
    "cwd",
    "home",
    "expanduser",
    "gettempdir",
    "which",
}
#: (module, line text) pairs allowed, each with its reason.
ALLOWED = {
    # the environment's mapping itself, kept to read the secrets from at each log line
    ("bridge/policy/redact.py", "_envs: ClassVar[list[Mapping[str, str]]] = [os.environ]"),
}


def _runs_at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a module's (or class body's) statements that run when it is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue  # a script's own run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from node.decorator_list
            yield from node.args.defaults
            yield from (d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, ast.ClassDef):
            yield from node.decorator_list
            yield from node.bases
            yield from _runs_at_import(node.body)
            continue
        yield node


def _lambda_free_walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node` except those inside a lambda (which runs when called)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.Lambda):
            yield from _lambda_free_walk(child)


def _reads_at_import(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT).as_posix()
    found = []
    for top in _runs_at_import(ast.parse(source).body):
        for node in _lambda_free_walk(top):
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                name = node.id  # `environ` imported from os; not a field named `cwd`
            else:
                continue
            if name in READERS:
                line = source.splitlines()[node.lineno - 1].strip()
                if (rel, line) not in ALLOWED:
                    found.append(f"{rel}:{node.lineno}: {line}")
    return found


@pytest.mark.parametrize(
    "package", sorted(p.name for p in BRIDGE.iterdir() if p.is_dir() and p.name != "__pycache__")
)
def test_no_module_reads_the_environment_at_import(package: str) -> None:
    modules = sorted((BRIDGE / package).rglob("*.py"))
    assert modules, package
    reads = [read for module in modules for read in _reads_at_import(module)]
    assert reads == [], "read at import (read it where it is used):\n" + "\n".join(reads)


def test_the_top_modules_read_nothing_at_import() -> None:
    reads = [read for module in sorted(BRIDGE.glob("*.py")) for read in _reads_at_import(module)]
    assert reads == [], "\n".join(reads)


def test_the_check_finds_a_read_at_import(tmp_path: Path) -> None:
    """The check itself: each way a module could read its environment at import is found."""
    module = ROOT / "bridge" / "_probe_for_the_check.py"
    module.write_text(
        "import os, sys\nfrom os import environ\n"
        "A = os.environ.get('X')\n"
        "class B:\n    c = environ['Y']\n"
        "def d(e=sys.argv):\n    return os.environ\n"
        "f = lambda: os.getenv('Z')\n",
        encoding="utf-8",
    )
    try:
        reads = _reads_at_import(module)
    finally:
        module.unlink()
    assert [r.split(": ", 1)[0].rsplit(":", 1)[1] for r in reads] == ["3", "5", "6"]


_KEEPS = r"""
import importlib, json, os, sys, types
from tests.support.forkserver import PRELOAD

for name in PRELOAD:
    importlib.import_module(name)
marker, knob = sys.argv[1], float(sys.argv[2])
found, seen = [], set()


def ours(obj):
    return (getattr(obj, "__module__", "") or "").startswith("bridge")


def walk(obj, path, depth):
    if depth > 5 or id(obj) in seen or obj is os.environ or isinstance(obj, types.ModuleType):
        return
    seen.add(id(obj))
    if isinstance(obj, (str, bytes)):
        text = obj if isinstance(obj, str) else obj.decode("latin-1")
        if marker in text or text == str(knob):
            found.append(path)
    elif isinstance(obj, float):
        if obj == knob:
            found.append(path)
    elif isinstance(obj, dict):
        for key, value in list(obj.items()):
            walk(key, path + "{key}", depth + 1)
            walk(value, f"{path}[{key!r}]", depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(list(obj)):
            walk(value, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, types.FunctionType):
        for i, value in enumerate(obj.__defaults__ or ()):
            walk(value, f"{path}.__defaults__[{i}]", depth + 1)
        walk(obj.__kwdefaults__ or {}, path + ".__kwdefaults__", depth + 1)
    elif isinstance(obj, type):
        if ours(obj):
            for key, value in list(vars(obj).items()):
                walk(value, f"{path}.{key}", depth + 1)
    elif ours(type(obj)):
        attrs = dict(getattr(obj, "__dict__", {}))
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
        for key, value in attrs.items():
            walk(value, f"{path}.{key}", depth + 1)


for name, module in sorted(sys.modules.items()):
    if name.startswith("bridge"):
        for key, value in list(vars(module).items()):
            if not key.startswith("__"):
                walk(value, f"{name}.{key}", 0)
print(json.dumps(found))
"""


def test_importing_the_bridge_keeps_nothing_of_its_environment(tmp_path: Path) -> None:
    """What the fork server imports, imported under an environment of telltale values (every
    PI_BRIDGE_ knob, a secret, HOME, the working directory): no module keeps any of them."""
    marker = "telltale0a1b2c3d4e5f6a7b8c9d0e1f"
    knob = "7.125"
    knobs = set()
    for module in BRIDGE.rglob("*.py"):
        knobs |= set(re.findall(r'"(PI_BRIDGE_[A-Z0-9_]+)"', module.read_text(encoding="utf-8")))
    assert "PI_BRIDGE_RPC_COMMAND_TIMEOUT" in knobs, sorted(knobs)
    cwd = tmp_path / marker
    cwd.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PI_BRIDGE_")},
        **dict.fromkeys(knobs, knob),
        "PROBE_API_KEY": marker,
        "HOME": str(cwd),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-c", _KEEPS, marker, knob]
    done = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
