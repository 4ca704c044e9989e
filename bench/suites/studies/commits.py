"""The rpc engine's trial for two commits of the bridge, alternating, in one invocation.

python -m bench commits BEFORE [AFTER] [--trials N]
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import CACHE, PYTHON, ROOT, median
from bench.model import scripted_model
from bench.suites.studies import conversation

FIGURES = ("next_prompt_first", "first_prompt_first", "next_prompt_total", "cancel_mid_tool")


def _export(commit: str, into: Path) -> Path:
    """The commit's tree under `into` (its bridge/ package importable from there)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "bridge"],
        check=True,
        capture_output=True,
    ).stdout
    target = into / commit.replace("/", "_")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def _argv(tree: Path) -> Callable[[], list[str]]:
    # sniffio is kept out of both trees' bridges alike: installed (a dependency's, since), it made
    # anyio find no event loop in pygls's handler thread in trees before the bridge worked around
    # it, which then never started a spare. Without it anyio takes the loop to be asyncio's.
    code = (
        "import sys; sys.modules['sniffio'] = None; "
        f"sys.path.insert(0, {str(tree)!r}); from bridge.cli import main; sys.exit(main())"
    )
    return lambda: [PYTHON, "-c", code]


def _head() -> str:
    """The commit the working tree's bridge/ is at, and whether it has changes on top."""

    def git(*words: str) -> str:
        out = subprocess.run(["git", "-C", str(ROOT), *words], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        " with changes" if git("status", "--porcelain", "bridge") else ""
    )


def main(argv: list[str] | None = None) -> int:
    """Run both commits' trials and print the medians, after/before."""
    parser = argparse.ArgumentParser(prog="python -m bench commits", description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default=None, help="a commit (default: the working tree)")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--out", type=Path, default=CACHE / "results-commits.json", help="the medians (JSON)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-commits-") as scratch:
        trees = {"before": _export(args.before, Path(scratch))}
        trees["after"] = _export(args.after, Path(scratch)) if args.after else ROOT
        results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        with scripted_model() as model:
            for trial in range(args.trials):
                order = ("before", "after") if trial % 2 == 0 else ("after", "before")
                for name in order:
                    conversation.bridge_argv = _argv(trees[name])
                    results[name].append(conversation.bridge_trial(model, "rpc", 5))
    after_name = args.after or f"working tree ({_head()})"
    stored: dict[str, Any] = {
        "command": " ".join(["python -m bench commits", *(argv if argv is not None else sys.argv[1:])]),
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "before": args.before,
        "after": after_name,
        "trials": args.trials,
        "figures": {},
    }
    print(f"| figure (ms) | {args.before} | {after_name} | ratio |")
    print("|---|---|---|---|")
    for figure in FIGURES:
        before = median([t[figure] for t in results["before"]]) * 1000
        after = median([t[figure] for t in results["after"]]) * 1000
        stored["figures"][figure] = {"before_ms": before, "after_ms": after}
        print(f"| {figure} | {before:.2f} | {after:.2f} | {after / before:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stored, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
