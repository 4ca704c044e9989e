"""`pi-bridge acp` against pi-acp 0.0.34: the same ACP client, sequence, pi and scripted model.

python -m bench acp_side [--trials N]
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
#: Why each figure stands where it does: hand-written, carried into the section as it is.
REASONS = ROOT / "bench" / "report" / "acp_side_reasons.md"


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
            REASONS.read_text(encoding="utf-8").strip(),
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
