#!/usr/bin/env python3
"""A tiny pi stand-in for the fuzz and load suites, speaking pi 1.6.0's `--mode json` format.

The scenario is the `--model` flag, as for tests/fakes/fake_pi.py:
- `env`: answers with which of the variables named in the prompt (one per line) are set, with
  each value's length and SHA-256, never the value itself;
- `digest`: answers with the length and SHA-256 of the prompt bytes it read on stdin;
- `flood-N` / `flood-N-S`: streams N numbered deltas (`d0000001;`, padded to S chars) as fast as
  it can write, then ends;
- `sleep`: starts an answer, then sleeps (a run to cancel);
- `stderr-env`: prints nothing on stdout and exits 1 (the bridge then reports pi's stderr, which
  is pi's own business: it names the variables, never their values).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")


def delta(text: str) -> dict[str, object]:
    return {
        "type": "message_update",
        "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": text},
    }


def answer_start() -> None:
    emit(
        {
            "type": "session",
            "version": 3,
            "id": "fuzz-session",
            "timestamp": "2026-11-29T00:00:00Z",
            "cwd": os.getcwd(),
        }
    )
    emit({"type": "agent_start"})
    emit({"type": "message_start", "message": {"role": "assistant", "content": []}})


def answer(text: str, deltas: list[str]) -> None:
    answer_start()
    for piece in deltas:
        emit(delta(piece))
    usage = {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2, "cost": {"total": 0}}
    emit(
        {
            "type": "message_end",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "usage": usage,
                "stopReason": "stop",
            },
        }
    )
    emit({"type": "agent_end", "messages": []})
    sys.stdout.flush()


def flood_piece(index: int, size: int = 9) -> str:
    """The text of delta `index` of a flood (`size` chars): numbered, so any loss or reordering shows."""
    head = f"d{index:07d};"
    return head + "." * max(0, size - len(head))


def main() -> int:
    argv = sys.argv[1:]
    scenario = argv[argv.index("--model") + 1] if "--model" in argv else "env"
    raw = sys.stdin.buffer.read()
    prompt = raw.decode("utf-8", "replace")
    if scenario == "digest":
        text = f"len={len(raw)} sha256={hashlib.sha256(raw).hexdigest()}"
        answer(text, [text])
    elif scenario == "env":
        lines = []
        for name in prompt.split():
            value = os.environ.get(name)
            if value is None:
                lines.append(f"{name}=absent")
            else:
                digest = hashlib.sha256(value.encode()).hexdigest()
                lines.append(f"{name}=present len={len(value)} sha256={digest}")
        text = "\n".join(lines)
        answer(text, [line + "\n" for line in lines[:-1]] + lines[-1:])
    elif scenario.startswith("flood-"):
        count, _, size = scenario.removeprefix("flood-").partition("-")
        pieces = [flood_piece(i, int(size or 9)) for i in range(int(count))]
        answer("".join(pieces), pieces)
    elif scenario == "sleep":
        answer_start()
        emit(delta("sleeping"))
        sys.stdout.flush()
        time.sleep(300)
    elif scenario == "stderr-env":
        names = " ".join(name for name in prompt.split() if name in os.environ)
        sys.stderr.write(f"fake agent: failing on purpose; these variables were set: {names}\n")
        return 1
    else:
        sys.stderr.write(f"fake agent: unknown scenario {scenario}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
