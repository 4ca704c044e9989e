"""What the sandbox costs (issue #26): one sandboxed bash call against an unsandboxed one.

python -m bench sandbox [--trials N]
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bridge_parts import (
    SANDBOX_DIR_ENV,
    SECCOMP_FILE,
    ModeBoard,
    SandboxBoard,
    bwrap,
    confinement,
    seccomp,
)
from bench.clients.pi_rpc import PiRpc, live_pi_launch
from bench.common import base_env, median, ms, side_by_side_main
from bench.model import PROVIDER, ModelEnv, scripted_model
from bridge.agents.values import GATE_DIR_ENV, RunOptions
from bridge.contract import SandboxSettings

SETTINGS = SandboxSettings(mode="workspace-write", network=False)
COMMAND = "echo hi"
TARGET_MS = 10.0


class SandboxedPi(PiRpc):
    """A live pi launched as the bridge launches one, with the sandbox dir in its environment."""

    def __init__(self, model: ModelEnv, gate_dir: Path, sandbox_dir: Path) -> None:
        spec = live_pi_launch(RunOptions(prompt="", cwd=str(model.workdir), provider=PROVIDER, model="tool"))
        env = {
            **base_env(),
            **spec.env,
            **model.pi_env(),
            GATE_DIR_ENV: str(gate_dir),
            SANDBOX_DIR_ENV: str(sandbox_dir),
        }
        super().__init__(model, list(spec.argv), env)

    def session_id(self) -> str:
        """The id of pi's session (what the board names its file by)."""
        start = len(self.lines)
        self.send({"id": "state", "type": "get_state"})
        self.wait(lambda r: r.get("id") == "state", start, 60)
        state = next(r for _, r in self.lines[start:] if r.get("id") == "state")
        return str(state["data"]["sessionId"])

    def bash_call(self) -> tuple[float, str]:
        """One `tool` turn: (tool_execution_start → tool_execution_end in seconds, its output)."""
        start = len(self.lines)
        self.send({"type": "prompt", "message": "go"})
        self.wait(lambda r: r.get("type") == "agent_settled", start, 60)
        records = self.lines[start:]
        began = next(at for at, r in records if r.get("type") == "tool_execution_start")
        ended, end = next((at, r) for at, r in records if r.get("type") == "tool_execution_end")
        return ended - began, json.dumps(end.get("result"))


def pi_cost(model: ModelEnv, trials: int) -> dict[str, Any]:
    """Figure 1: pi's bash call with and without the sandbox (ms)."""
    times: dict[str, list[float]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory(prefix="pi-bench-sandbox-") as tmp:
        modes, board = ModeBoard(Path(tmp) / "gate"), SandboxBoard(Path(tmp) / "state")
        pis = {name: SandboxedPi(model, modes.path, board.path) for name in ("with", "without")}
        try:
            sandboxed = pis["with"].session_id()
            board.publish(sandboxed, SETTINGS, str(model.workdir), dict(os.environ))
            # The gate reads a conversation without a mode file as `ask`: both run in `full`.
            modes.publish(sandboxed, "full")
            modes.publish(pis["without"].session_id(), "full")
            for pi in pis.values():  # one unmeasured call each
                pi.bash_call()
            for trial in range(trials):
                for name in ("with", "without") if trial % 2 == 0 else ("without", "with"):
                    took, output = pis[name].bash_call()
                    if "hi" not in output:
                        raise RuntimeError(f"the {name} call printed no `hi`: {output[:300]}")
                    times[name].append(took)
        finally:
            for pi in pis.values():
                pi.close()
            board.remove()
    return _figure(times, trials)


def spawn_cost(trials: int) -> dict[str, Any]:
    """Figure 2: `bash -c` of the command, plain and behind the bwrap prefix (ms)."""
    found = bwrap.probe()
    bash = shutil.which("bash")
    if found.path is None or bash is None:
        raise RuntimeError(f"no sandbox here: {found.reason}")
    with tempfile.TemporaryDirectory(prefix="pi-bench-sandbox-ws-") as workspace:
        filter_file = Path(workspace) / SECCOMP_FILE
        filter_file.write_bytes(seccomp.program() or b"")
        prefix = bwrap.argv_prefix(found.path, confinement(SETTINGS, workspace, dict(os.environ)))
        plain = f"exec {bash} -c {shlex.quote(COMMAND)}"
        confined = f"exec {shlex.join(prefix)} {plain[5:]} 3<{shlex.quote(str(filter_file))}"
        argv = {"with": [bash, "-c", confined], "without": [bash, "-c", plain]}
        times: dict[str, list[float]] = {"with": [], "without": []}
        for trial in range(trials + 1):
            for name in ("with", "without") if trial % 2 == 0 else ("without", "with"):
                began = time.perf_counter()
                subprocess.run(argv[name], cwd=workspace, capture_output=True, check=True)
                if trial:  # the first is unmeasured
                    times[name].append(time.perf_counter() - began)
    return _figure(times, trials)


def _figure(times: dict[str, list[float]], trials: int) -> dict[str, Any]:
    with_ms, without_ms = ms(median(times["with"])), ms(median(times["without"]))
    return {
        "trials": trials,
        "with_ms": with_ms,
        "without_ms": without_ms,
        "added_ms": with_ms - without_ms,
        # the machine's 1-minute load average as the figure ends: a loaded machine inflates both
        "load": round(os.getloadavg()[0], 2),
        "raw_with_ms": [round(ms(t), 2) for t in times["with"]],
        "raw_without_ms": [round(ms(t), 2) for t in times["without"]],
    }


def run(trials: int) -> dict[str, Any]:
    """Both figures, on one scripted model."""
    with scripted_model() as model:
        return {"pi": pi_cost(model, trials), "spawn": spawn_cost(trials)}


def summary(res: dict[str, Any]) -> list[str]:
    """One line per figure."""
    lines = []
    for key, label in (("pi", "pi's bash call (tool start → end)"), ("spawn", "bash -c spawn alone")):
        f = res[key]
        verdict = "within" if f["added_ms"] <= TARGET_MS else "over"
        lines.append(
            f"sandbox, {label}: with {f['with_ms']:.2f} ms, without {f['without_ms']:.2f} ms: "
            f"{f['added_ms']:+.2f} ms ({verdict} the {TARGET_MS:g} ms target, {f['trials']} trials, "
            f"load average {f.get('load', 0):.2f} on {os.cpu_count()} CPUs)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    count = ("trials", 40, "alternating trials of each figure")
    return side_by_side_main(argv, "python -m bench sandbox", __doc__ or "", count, run, summary)


if __name__ == "__main__":
    raise SystemExit(main())
