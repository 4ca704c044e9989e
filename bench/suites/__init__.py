"""The benchmarks `python -m bench` runs, one module per benchmark; `studies/` holds those run by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def find(name: str) -> str | None:
    """The module of the runnable suite or study `name` (`python -m bench NAME`), or None."""
    if not name.isidentifier():
        return None
    for package in ("bench.suites", "bench.suites.studies"):
        spec = importlib.util.find_spec(f"{package}.{name}")
        if spec is not None and spec.origin and 'if __name__ == "__main__":' in Path(spec.origin).read_text():
            return f"{package}.{name}"
    return None
