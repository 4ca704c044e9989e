"""Follow-ups sent the moment the answer before came: the client's time to the first message, and
the bridge's own run.slot → engine.prompt span of each (its trace), over one conversation.

python -m bench followup_gap [--prompts N] [--files N]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.clients.lsp import LspClient
from bench.common import base_env, bridge_argv, median
from bench.model import ModelEnv, scripted_model
from bench.suites.studies.conversation import (
    FIRST_PROMPT_PAUSE,
    initialize_like_an_editor,
    timed_prompt,
    wait_spare,
)


def _fill(workdir: Path, files: int) -> None:
    """A workspace of `files` small files, so each turn's checkpoint has work to do."""
    for index in range(files):
        folder = workdir / f"d{index % 50}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{index}.txt").write_text(f"file {index}\n" * 20)


def _gaps(marks: list[tuple[str, int]]) -> list[float]:
    """Each prompt's run.slot → engine.prompt (ms), in order."""
    gaps: list[float] = []
    slot: int | None = None
    for name, ns in marks:
        if name == "run.slot":
            slot = ns
        elif name == "engine.prompt" and slot is not None:
            gaps.append((ns - slot) / 1e6)
            slot = None
    return gaps


def conversation(model: ModelEnv, prompts: int, trace: Path) -> tuple[list[float], list[float]]:
    """One bridge, one conversation: each follow-up's first message (ms) and its bridge span (ms)."""
    env = {**base_env(), "PI_BRIDGE_TRACE": str(trace)}
    client = LspClient(bridge_argv(), env=env, cwd=str(model.workdir))
    firsts: list[float] = []
    try:
        initialize_like_an_editor(client, model, "rpc")
        wait_spare(client)
        time.sleep(FIRST_PROMPT_PAUSE)
        _, _, result = timed_prompt(client, model, "f-0", "text", None)
        for index in range(prompts):
            first, _, _ = timed_prompt(client, model, f"f-{index + 1}", "text", result["sessionId"])
            firsts.append(first * 1000)
    finally:
        client.close()
    marks = [(str(n), int(t)) for n, t in json.loads(trace.read_text())]
    return firsts, _gaps(marks)[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench followup_gap", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--files", type=int, default=0)
    args = parser.parse_args(argv)
    with scripted_model() as model, tempfile.TemporaryDirectory(prefix="pi-bench-gap-") as tmp:
        _fill(model.workdir, args.files)
        firsts, gaps = conversation(model, args.prompts, Path(tmp) / "trace.json")
    result: dict[str, Any] = {
        "prompts": args.prompts,
        "files": args.files,
        "load": os.getloadavg()[0],
        "first_message_ms": {"median": median(firsts), "max": max(firsts)},
        "slot_to_prompt_ms": {"median": median(gaps), "max": max(gaps)},
    }
    print(f"follow-up → first message: median {median(firsts):.1f} ms, max {max(firsts):.1f} ms")
    print(f"run.slot → engine.prompt:  median {median(gaps):.2f} ms, max {max(gaps):.2f} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    raise SystemExit(main())
