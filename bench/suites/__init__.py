"""The benchmarks `python -m bench` runs, one module per benchmark; `studies/` holds those run by hand."""

from __future__ import annotations

import importlib.util


def find(name: str) -> str | None:
    """The module of the suite or study `name` (`python -m bench NAME`), or None."""
    if not name.isidentifier():
        return None
    for package in ("bench.suites", "bench.suites.studies"):
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return f"{package}.{name}"
    return None
