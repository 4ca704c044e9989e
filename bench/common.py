"""Shared set-up of the benchmarks: paths, the environment pi and the bridge run in, statistics."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CACHE = BENCH / ".cache"
NODE_BIN = ROOT / ".tools" / "node_modules" / ".bin"
PYTHON = sys.executable
#: The pi-acp the side-by-side figures run against: scripts/setup.sh's, when it is this version,
#: else installed into bench/.cache on first use.
PI_ACP_VERSION = "0.0.34"


def _pi_acp() -> Path:
    """pi-acp's entry point: the one scripts/setup.sh installed for the tests if it is the pinned
    version (no second install), else bench/.cache's."""
    installed = ROOT / ".tools-acp" / "node_modules" / "pi-acp"
    try:
        version = json.loads((installed / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        version = None
    if version == PI_ACP_VERSION and (installed / "dist" / "index.js").exists():
        return installed / "dist" / "index.js"
    return CACHE / "node_modules" / "pi-acp" / "dist" / "index.js"


PI_ACP = _pi_acp()


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


def _note(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def ensure_pi_acp() -> bool:
    """Install pi-acp into bench/.cache (git-ignored) with npm if it is not there yet."""
    if PI_ACP.exists():
        return True
    _note(f"installing pi-acp {PI_ACP_VERSION} into bench/.cache with npm")
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), f"pi-acp@{PI_ACP_VERSION}"],
            check=True,
            capture_output=True,
            timeout=300,
            env=base_env(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _note(f"could not install pi-acp: {exc}")
    return PI_ACP.exists()


def side_by_side_main(
    argv: list[str] | None,
    prog: str,
    doc: str,
    count: tuple[str, int, str],
    run: Callable[[int], dict[str, Any]],
    summary: Callable[[dict[str, Any]], list[str]],
) -> int:
    """The command line of a with/without benchmark: its count flag, its summary, its figures as
    JSON (the raw samples left out) and how long it took."""
    flag, default, help_text = count
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument(f"--{flag}", type=int, default=default, help=help_text)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    res = run(getattr(args, flag))
    print("\n".join(summary(res)))
    print(json.dumps({k: {n: v for n, v in f.items() if not n.startswith("raw")} for k, f in res.items()}))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0
