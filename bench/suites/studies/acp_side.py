"""`pi-bridge acp` against pi-acp 0.0.34: the same ACP client, sequence, pi and scripted model.

    python -m bench acp_side [--trials N]

The sequence (bench/suites/sidebyside.py's `acp_sequence`, for both): spawn → initialize; session/new;
first prompt; after a pause a second prompt in the same session; cancel mid-tool (`sleep 30`);
a 20,000-delta answer; then the adapter's own CPU and peak RSS. Both get the same npm registry
URL: a local listener that counts the connections made to it (pi-acp's update check), so network
calls are counted, not guessed. Banner chunks are answer chunks that are a version banner.
Trials alternate between the two adapters; medians are printed as a markdown table.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
from collections.abc import Callable

from bench.common import PYTHON, ROOT
from bench.model import scripted_model
from bench.suites.sidebyside import Sequence, acp_sequence

# `full`: pi-acp asks nothing, so the side by side compares the same turns (approvals: bench/suites/gate.py).
BRIDGE_ACP = [PYTHON, "-m", "bridge", "acp", "--default-mode", "full"]


class CountingRegistry:
    """A TCP listener on 127.0.0.1 standing in for the npm registry: it counts connections and
    closes each at once (so a client fails fast, as offline)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The registry URL to hand to npm."""
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()


ROWS: list[tuple[str, Callable[[Sequence], float], str]] = [
    ("adapter spawn → initialize answered", lambda s: s.spawn_to_ready * 1000, "ms"),
    ("session/new answered", lambda s: s.session_new * 1000, "ms"),
    ("cold: adapter spawn → first answer chunk", lambda s: s.spawn_to_first_chunk * 1000, "ms"),
    ("first prompt → first chunk", lambda s: s.first_prompt_first_chunk * 1000, "ms"),
    ("first prompt → answered", lambda s: s.first_prompt_total * 1000, "ms"),
    ("second prompt → first chunk", lambda s: s.second_prompt_first_chunk * 1000, "ms"),
    ("second prompt → answered", lambda s: s.second_prompt_total * 1000, "ms"),
    ("cancel mid-tool → answered cancelled", lambda s: s.cancel_mid_tool * 1000, "ms"),
    ("processes left after cancel", lambda s: float(s.left_after_cancel), ""),
    ("20,000-delta answer → answered", lambda s: s.long_total * 1000, "ms"),
    ("20,000-delta answer: chars/s", lambda s: s.long_chars / s.long_total if s.long_total else 0.0, ""),
    ("adapter CPU after initialize", lambda s: s.cpu_after_ready, "s"),
    ("adapter peak RSS", lambda s: s.peak_rss_kb / 1024, "MB"),
    ("banner chunks (whole sequence)", lambda s: float(s.banner_chunks), ""),
    ("npm registry connections", lambda s: float(s.registry_calls), ""),
]


def run(trials: int, pause: float) -> dict[str, list[Sequence]]:
    """Alternate the two adapters for `trials` each; every trial gets a fresh adapter."""
    out: dict[str, list[Sequence]] = {"bridge": [], "pi_acp": []}
    with scripted_model() as model:
        for trial in range(trials):
            for side, argv in (("bridge", BRIDGE_ACP), ("pi_acp", None)):
                registry = CountingRegistry()
                try:
                    seq = acp_sequence(model, argv=argv, registry=registry.url, pause=pause)
                finally:
                    registry.close()
                seq.registry_calls = registry.connections
                out[side].append(seq)
                print(f"trial {trial + 1} {side}: done {seq.notes or ''}", file=sys.stderr)
    return out


def _num(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table(results: dict[str, list[Sequence]]) -> str:
    """Medians (min-max) of each figure, with the ratio bridge/pi-acp."""
    lines = ["| figure | pi-bridge acp | pi-acp 0.0.34 | ratio |", "|---|---|---|---|"]
    for name, get, unit in ROWS:
        cells = []
        medians = []
        for side in ("bridge", "pi_acp"):
            values = [get(s) for s in results[side]]
            med = statistics.median(values)
            medians.append(med)
            spread = f" ({_num(min(values))}-{_num(max(values))})" if len(values) > 1 else ""
            cells.append(f"{_num(med)} {unit}{spread}".strip())
        ratio = f"{medians[0] / medians[1]:.2f}x" if medians[1] else "—"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench acp_side", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--pause", type=float, default=2.0, help="seconds between the first and second prompt"
    )
    parser.add_argument(
        "--write", action="store_true", help=f"also write {SECTION.name} (quoted by docs/benchmarks.md)"
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    text = table(run(args.trials, args.pause))
    print(text)
    if args.write:
        SECTION.write_text(section(text, args.trials, load_before, os.getloadavg()[0]))
    return 0


SECTION = ROOT / "docs" / "benchmarks-acp.md"


def section(text: str, trials: int, load_before: float, load_after: float) -> str:
    """The docs section: how it was run, the table, and why a figure is behind."""
    return "\n".join(
        [
            "## 8. `pi-bridge acp` side by side with pi-acp 0.0.34",
            "",
            f"`python -m bench acp_side --trials {trials} --write`: the same ACP client "
            "(bench/clients/acp.py) and",
            "sequence on both, fresh adapter per trial, trials alternating; medians (min-max). Load average",
            f"{load_before:.2f} before and {load_after:.2f} after on {os.cpu_count()} cores.",
            "",
            text,
            "",
            REASONS.strip(),
            "",
        ]
    )


REASONS = """
How the start-up is ordered (bridge/fronts/acp/first_frame.py, serve.py): a thread with only the
standard library loaded answers a plain first `initialize` by hand (the same dict the SDK path
validates, checked against the SDK's schema in tests), the run registry starts and pre-spawns pi,
then the SDK (whose `acp.schema` alone imports in ~0.5-0.8 s) loads in a worker thread while pi
boots, and the wire validators and agent adapters are built there too; `session/new` waits for
both, and is still ahead of pi-acp's (no `pi --version`, no `npm view`).

The per-prompt path, measured with strace of each adapter's main thread (frame read → prompt
written to pi; pi's line read → update written) and timestamps in the bridge:
- in: a valid `session/prompt` is started as its frame is read (`AcpAgent.direct`), not after
  the SDK's receive loop, a task per frame and its router; the run's task is a plain asyncio task,
  and pi's stdin is a pipe the bridge owns (bridge/process/stdin_pipe.py): a command is in the pipe when
  the write returns, with no loop trip after it. Frame → prompt on pi's stdin: 1.24 ms under
  strace before these changes, pi-acp 0.70 ms.
- out: an update is written in the callback that read pi's line while nothing waits in line,
  not through the outbox and the pump task: pi's line → stdout 0.41 ms before, now 0.23 ms
  (pi-acp 0.27 ms).
- cancel: a `session/cancel` notification is served whole as its frame is read (when no earlier
  frame still waits for the SDK's dispatch: then the SDK's dispatch cancels a prompt that was on
  its way). Setting the prompt's cancel token writes pi's `abort` in that same call (the token's
  synchronous callback). The run's processes are listed for the receipt once the abort is on its
  way, and the proof after pi's reply reads the cgroup's member list and the stat of any member
  but pi, with os.read: after the idle wait on pi, Path.read_text and pi's own stat had cost
  ~0.2 ms more. Measured with timestamps in the bridge: frame read → `abort` written 0.5-0.7 ms
  before (the SDK's dispatch of the notification ran first, ~0.45 ms, then a cgroup listing and a
  loop trip), now 0.12-0.24 ms; pi's reply → the proof 0.36-0.49 ms, now 0.18-0.26 ms; → the
  answer written 0.15-0.2 ms later. pi-acp answers after pi's `agent_end` and a
  `get_session_stats` round trip through pi (strace of both: its frame read → `abort` written
  0.55 ms, pi's abort reply → its answer 0.9-1.4 ms, under strace), and checks nothing: it sends
  SIGTERM to its direct child only, and pi's tools' daemons are not its concern.
pi's own share (prompt written → its first text delta, ~11-14 ms) is the same on both sides, and
the ranges of the two columns overlap on the per-prompt figures: medians within this machine's
noise, which is why they are taken over 9 trials.

Behind, in some invocations, and only on figures where the two columns' ranges overlap: five
invocations of 9 trials each were run on 2026-12-01 after the cancel changes (the table is the
last, on a loaded machine). bridge / pi-acp medians, ms:

| figure | 1st | 2nd | 3rd | 4th | 5th (table) | ahead in |
|---|---|---|---|---|---|---|
| cancel mid-tool → answered | 9.75 / 10.3 | 9.47 / 10.3 | 8.84 / 8.99 | 9.38 / 10.2 | 10.8 / 11.1 | 5 of 5 |
| first prompt → first chunk | 63.1 / 65.4 | 59.4 / 63.5 | 66.2 / 66.3 | 61.0 / 55.5 | 59.4 / 64.2 | 4 of 5 |
| first prompt → answered | 227 / 236 | 225 / 230 | 227 / 234 | 223 / 226 | 224 / 236 | 5 of 5 |
| second prompt → first chunk | 16.8 / 19.1 | 18.4 / 17.3 | 16.6 / 17.9 | 16.4 / 17.7 | 20.4 / 17.5 | 3 of 5 |
| second prompt → answered | 178 / 180 | 175 / 183 | 175 / 184 | 173 / 182 | 179 / 183 | 5 of 5 |
| 20,000-delta answer | 1151 / 1211 | 1146 / 1201 | 1139 / 1180 | 1022 / 1132 | 1295 / 1206 | 4 of 5 |

Start-up, session/new, CPU, RSS, banner and network calls were ahead in every invocation. The
second prompt's first chunk is one pi delta after pi's own ~11-14 ms, and the bridge's share of it
(frame → prompt on pi's stdin, pi's line → update written) was level with pi-acp's under strace;
the 5th invocation's median holds a 60.7 ms outlier. Before these changes the cancel was behind
in 5 of 6 invocations by 0.7-1.3 ms (7.05 against 6.14 ms in the table then).
"""


if __name__ == "__main__":
    sys.exit(main())
