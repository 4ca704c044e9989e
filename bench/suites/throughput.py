"""Benchmark 1 and 5: replay a pi stream through the bridge and through the floor; CPU, rate, peak RSS."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import orjson

from bench import agents as stand_ins
from bench import procs
from bench.agents.streams import Stream
from bench.clients.lsp import LspClient
from bench.common import ROOT, base_env, bridge_argv


@dataclass
class Trial:
    """One replay through one consumer."""

    wall: float
    cpu: float
    peak_rss_kb: int
    frames: int
    start_rss_kb: int = 0


def replay_argv(stream: Stream) -> list[str]:
    """The agent command that replays stream."""
    return stand_ins.replay(stream.path)


def bridge_trial(stream: Stream, *, extra_env: dict[str, str] | None = None) -> Trial:
    """Replay stream through a fresh bridge; check the answer holds the whole text."""
    env = {**base_env(), **(extra_env or {})}
    client = LspClient(bridge_argv(), env=env, cwd=str(ROOT), keep_messages=False)
    try:
        client.initialize({"piCommand": replay_argv(stream), "engine": "json"})
        with tempfile.TemporaryDirectory(prefix="pi-bridge-bench-") as cwd:
            start_rss = procs.status_kb(client.pid, "VmRSS")
            cpu0 = procs.cpu_seconds(client.pid)
            msg_id, sent = client.request("pi/run", {"prompt": "Say hello", "cwd": cwd})
            answered, answer = client.wait_response(msg_id, timeout=600)
            cpu1 = procs.cpu_seconds(client.pid)
            peak = procs.status_kb(client.pid, "VmHWM")
        result = answer.get("result") or {}
        if result.get("status") != "completed" or len(result.get("text", "")) != stream.text_length:
            raise RuntimeError(
                f"bridge replay of {stream.path.name} went wrong: {orjson.dumps(answer)[:300]!r}"
            )
        return Trial(answered - sent, cpu1 - cpu0, peak, client.notifications, start_rss)
    finally:
        client.close()


def floor_trial(stream: Stream) -> Trial:
    """Replay stream through the floor (bench/agents/floor.py) into the same client."""
    client = LspClient(stand_ins.floor(replay_argv(stream)), env=base_env(), keep_messages=False)
    try:
        time.sleep(0.3)  # let the floor import orjson before the clock starts (its go-line wait)
        assert client.proc.stdin is not None
        sent = time.perf_counter()
        client.proc.stdin.write(b"go\n")
        answered, answer = client.wait_response(1, timeout=600)
        result = answer["result"]
        if result["textLength"] != stream.text_length:
            raise RuntimeError(f"floor replay of {stream.path.name} lost text: {result}")
        return Trial(answered - sent, result["cpuSeconds"], result["maxRssKb"], client.notifications)
    finally:
        client.proc.wait(30)
