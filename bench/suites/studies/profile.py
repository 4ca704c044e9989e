"""Profile the bridge on the throughput replays (py-spy) and its start-up imports (-X importtime).

python -m bench profile
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import tempfile
import time

from bench.agents import streams
from bench.clients.lsp import LspClient
from bench.common import CACHE, ROOT, base_env, bridge_argv
from bench.suites.throughput import replay_argv


def _summarize(collapsed: str, top: int = 25) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [
            frame.split(" (")[0] + " (" + frame.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
            for frame in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"samples: {total}", "", "self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    lines += ["", "inclusive time:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return lines


def profile_replay(fmt: str, count: int) -> list[str]:
    """py-spy the bridge while it streams one replay; return the summary."""
    stream = streams.ensure(fmt, count)
    raw = CACHE / f"profile-{fmt}.collapsed"
    spy = shutil.which("py-spy")
    if spy is None:
        return ["py-spy is not installed (pip install py-spy)"]
    client = LspClient(bridge_argv(), env=base_env(), cwd=str(ROOT), keep_messages=False)
    try:
        client.initialize({"piCommand": replay_argv(stream), "engine": "json"})
        # Attach (py-spy writes its own messages to stdout, which belongs to JSON-RPC here).
        argv = [
            spy,
            "record",
            "--pid",
            str(client.pid),
            "--format",
            "raw",
            "--rate",
            "1000",
            "--gil",
            "--output",
            str(raw),
        ]
        sampler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as cwd:
            msg_id, _ = client.request("pi/run", {"prompt": "x", "cwd": cwd})
            client.wait_response(msg_id, 600)
    finally:
        client.close(30)
    sampler.wait(30)
    return _summarize(raw.read_text())


def import_profile(top: int = 20) -> list[str]:
    """The slowest imports on the start-up path (cumulative µs, from -X importtime)."""
    client = LspClient(
        [sys.executable, "-X", "importtime", "-m", "bridge"],
        env=base_env(),
        cwd=str(ROOT),
        stderr=subprocess.PIPE,
    )
    client.initialize(None)
    client.close()
    assert client.proc.stderr is not None
    rows = []
    for line in client.proc.stderr.read().decode().splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:") :].split("|")]
            if parts[1].isdigit():
                rows.append((int(parts[1]), parts[2]))
    rows.sort(reverse=True)
    return [f"  {us / 1000:7.1f} ms  {name}" for us, name in rows[:top]]


def main() -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    for fmt, count in (("1.6", 100_000), ("0.73", 8_000)):
        lines = profile_replay(fmt, count)
        (CACHE / f"profile-{fmt}.txt").write_text("\n".join(lines) + "\n")
        print(f"== bridge on the {fmt} replay ({count} deltas)")
        print("\n".join(lines))
    lines = import_profile()
    (CACHE / "profile-imports.txt").write_text("\n".join(lines) + "\n")
    print("== start-up imports (cumulative)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
