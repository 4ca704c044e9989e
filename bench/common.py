"""Shared set-up of the benchmarks: paths, the environment pi and the bridge run in, statistics."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CACHE = BENCH / ".cache"
NODE_BIN = ROOT / ".tools" / "node_modules" / ".bin"
PI_ACP = CACHE / "node_modules" / "pi-acp" / "dist" / "index.js"
PYTHON = sys.executable


def base_env() -> dict[str, str]:
    """This environment with the project's pi/node first on PATH, and no bridge settings inherited."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PI_BRIDGE_")}
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def bridge_argv() -> list[str]:
    """How to start the bridge."""
    return [PYTHON, "-m", "bridge"]


def median(values: list[float]) -> float:
    """The median (nan for no values)."""
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1000.0
