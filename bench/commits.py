"""The rpc engine's trial for two commits of the bridge, alternating, in one invocation.

    python -m bench.commits BEFORE [AFTER] [--trials N]

A figure that moved between two days' runs may be the machine's: this runs bench/conversation.py's
`bridge_trial` (spare pi, first prompt, 5 consecutive prompts, cancel mid-tool) on each commit's
bridge, trials alternating, so both see the same machine. Each commit is exported with
`git archive` into a temporary directory and run from there (AFTER defaults to the working tree).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import conversation
from bench.common import PYTHON, median
from bench.model import scripted_model

ROOT = Path(__file__).resolve().parents[1]
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
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from bridge.cli import main; sys.exit(main())"
    return lambda: [PYTHON, "-c", code]


def main(argv: list[str] | None = None) -> int:
    """Run both commits' trials and print the medians, after/before."""
    parser = argparse.ArgumentParser(prog="python -m bench.commits", description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default=None, help="a commit (default: the working tree)")
    parser.add_argument("--trials", type=int, default=8)
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
    print(f"| figure (ms) | {args.before} | {args.after or 'working tree'} | ratio |")
    print("|---|---|---|---|")
    for figure in FIGURES:
        before = median([t[figure] for t in results["before"]]) * 1000
        after = median([t[figure] for t in results["after"]]) * 1000
        print(f"| {figure} | {before:.2f} | {after:.2f} | {after / before:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
