"""History and diff figures with the real pi: pi/sessions over 200 sessions, pi/session of a big
session, and how often the diff capture's snapshot of an edited file comes too late."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.bridge_parts import cwd_folder
from bench.clients.lsp import LspClient
from bench.common import base_env, bridge_argv, median, ms
from bench.model import PROVIDER, ModelEnv, scripted_model
from bridge.scripted_model import EDIT_FILE, EDIT_NEW, EDIT_OLD, EDIT_ORIGINAL

LATE_SNAPSHOT_LOG = "snapshot came after its edit"
OUTPUT = "x" * 20_000


def call(client: LspClient, method: str, params: Any, timeout: float = 120.0) -> tuple[float, Any]:
    """(seconds to answer, result) of one request."""
    msg_id, sent = client.request(method, params)
    arrived, answer = client.wait_response(msg_id, timeout)
    if "error" in answer:
        raise RuntimeError(f"{method} failed: {answer['error']}")
    return arrived - sent, answer["result"]


def run(client: LspClient, cwd: Path, model: str, **extra: Any) -> dict[str, Any]:
    params = {"prompt": f"Please {model}", "cwd": str(cwd), "provider": PROVIDER, "model": model, **extra}
    _, result = call(client, "pi/run", params)
    if result["status"] != "completed":
        raise RuntimeError(f"run failed: {result}")
    return dict(result)


def timed(client: LspClient, method: str, params: Any, trials: int) -> tuple[float, Any]:
    """Median seconds over `trials`, and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(trials):
        elapsed, result = call(client, method, params)
        times.append(elapsed)
    return median(times), result


def clone_sessions(original: Path, count: int) -> None:
    """`count` - 1 copies of a real session file, each with its own id (file name and header)."""
    lines = original.read_bytes().split(b"\n", 1)
    header = json.loads(lines[0])
    for index in range(count - 1):
        session_id = str(uuid.uuid4())
        header["id"] = session_id
        stamp = f"2026-01-01T00-00-{index // 1000:02d}-{index % 1000:03d}Z"
        target = original.parent / f"{stamp}_{session_id}.jsonl"
        target.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + lines[1])


def grow_session(original: Path, folder: Path, megabytes: int) -> tuple[str, Path]:
    """A session of about `megabytes` MB: the real session's turns repeated, tool outputs 20 kB."""
    entries = [json.loads(line) for line in original.read_text().splitlines() if line.strip()]
    header, body = entries[0], entries[1:]
    turn = [e for e in body if e.get("type") == "message" and e["message"].get("role") != "system"]
    session_id = str(uuid.uuid4())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"2026-01-02T00-00-00-000Z_{session_id}.jsonl"
    previous: str | None = None
    count = 0
    with path.open("w") as stream:
        stream.write(
            json.dumps({**header, "id": session_id, "cwd": str(folder)}, separators=(",", ":")) + "\n"
        )
        for entry in body[:4]:  # model, thinking level, system message: once
            stream.write(json.dumps(entry, separators=(",", ":")) + "\n")
            previous = entry.get("id", previous)
        while stream.tell() < megabytes * 1024 * 1024:
            for template in turn:
                count += 1
                entry = {**template, "id": f"{count:08x}", "parentId": previous}
                if entry["message"].get("role") == "toolResult":
                    entry["message"] = {**entry["message"], "content": [{"type": "text", "text": OUTPUT}]}
                stream.write(json.dumps(entry, separators=(",", ":")) + "\n")
                previous = entry["id"]
    return session_id, path


def edit_races(client: LspClient, root: Path, edits: int) -> int:
    """How many of `edits` edit runs carried the exact diff."""
    right = 0
    for index in range(edits):
        cwd = root / f"edit-{index}"
        cwd.mkdir()
        (cwd / EDIT_FILE).write_text(EDIT_ORIGINAL)
        result = run(client, cwd, "edit")
        diffs = [
            m["params"]["content"].get("diff")
            for _, m in client.messages
            if m["params"]["runId"] == result["runId"] and m["params"]["type"] == "tool.completed"
        ]
        expected = {"oldText": EDIT_ORIGINAL, "newText": EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW)}
        if diffs and diffs[0] and {key: diffs[0].get(key) for key in expected} == expected:
            right += 1
    return right


def measure(model: ModelEnv, sessions: int, megabytes: int, edits: int, log: Path) -> dict[str, Any]:
    env = {**base_env(), "PI_BRIDGE_LOG_LEVEL": "INFO"}
    with log.open("w") as stderr:
        client = LspClient(bridge_argv(), env=env, cwd=str(model.workdir), stderr=stderr)
    try:
        client.initialize({"piCommand": ["pi"], "env": model.pi_env()})
        conversation = model.workdir / "conversation"
        conversation.mkdir()
        first = run(client, conversation, "tool")
        run(client, conversation, "thinking", sessionId=first["sessionId"])
        folder = model.agent_dir / "sessions" / cwd_folder(str(conversation))
        (original,) = folder.glob("*.jsonl")
        clone_sessions(original, sessions)
        floor, _ = timed(client, "pi/runs", None, 20)
        listing, listed = timed(client, "pi/sessions", {"cwd": str(conversation), "limit": 1000}, 10)
        assert len(listed["sessions"]) == sessions, len(listed["sessions"])
        big_cwd = model.workdir / "big"
        big_id, big_path = grow_session(
            original, model.agent_dir / "sessions" / cwd_folder(str(big_cwd)), megabytes
        )
        reading, history = timed(client, "pi/session", {"sessionId": big_id}, 3)
        big_listing, _ = timed(client, "pi/sessions", {"cwd": str(big_cwd)}, 3)
        right = edit_races(client, model.workdir, edits)
    finally:
        client.close()
    late = log.read_text().count(LATE_SNAPSHOT_LOG)
    return {
        "pi/runs (baseline) ms": round(ms(floor), 2),
        f"pi/sessions of {sessions} sessions ms": round(ms(listing), 2),
        "pi/sessions ratio to pi/runs": round(listing / floor, 1),
        f"pi/session of a {big_path.stat().st_size / 2**20:.0f} MB session ms": round(ms(reading), 1),
        "pi/session turns kept / omitted": f"{len(history['turns'])} / {history.get('omittedTurns', 0)}",
        "pi/session answer MB": round(len(json.dumps(history)) / 2**20, 1),
        f"pi/sessions of the {megabytes} MB session ms": round(ms(big_listing), 1),
        "edit diffs right / runs": f"{right} / {edits}",
        "edit snapshots taken after the edit (reconstructed)": late,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--edits", type=int, default=20)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pi-bench-history-"))
    try:
        with scripted_model() as model:
            figures = measure(model, args.sessions, args.megabytes, args.edits, scratch / "bridge.log")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for name, value in figures.items():
        print(f"{name:55} {value}")


if __name__ == "__main__":
    main()
