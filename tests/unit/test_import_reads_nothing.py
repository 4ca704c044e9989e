"""No bridge module reads its process's environment, working directory or argv at import.

Why: a setting read into a module's constant holds the environment of whatever imported the
module first. The bridge reads its knobs (timeouts, limits, the trace) when it uses them, and the
tests' fork server (tests/support/forkserver.py) relies on it: it imports the bridge's modules
once, then forks a bridge per test, each with its own environment.
"""

from __future__ import annotations

import ast
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
