"""What the permission gate costs (issue #22): a `full` turn with the gate extension, and one approval.

python -m bench gate [--turns N] [--approvals N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.bridge_parts import ALLOW_ONCE, STATE_DIR_ENV
from bench.clients.lsp import LspClient, Message
from bench.clients.pi_rpc import PiRpc, live_pi_launch
from bench.common import base_env, bridge_argv, median, ms
from bench.model import PROVIDER, ModelEnv, scripted_model
from bench.suites.realpi import run_params
from bridge.agents.values import GATE_DIR_ENV, RunOptions

PROMPT = "Say hello"
KINDS = ("tool", "text")
PERMISSIONS = {"experimental": {"piBridge": {"permissions": True}}}
#: The title of the gate's dialog, and the answer that allows the call (extension/index.ts).
GATE_MARKER = "pi-bridge:permission"
ALLOW = json.dumps({"decision": "allow"})


# --------------------------------------------------------------------------- 1. the extension


class GatedPi(PiRpc):
    """A live pi launched as the bridge launches one, with or without the gate extension."""

    def __init__(self, model: ModelEnv, gate_dir: Path, *, extension: bool) -> None:
        spec = live_pi_launch(RunOptions(prompt="", cwd=str(model.workdir), provider=PROVIDER, model="text"))
        argv = list(spec.argv)
        tail = argv[-2:]
        if tail[:1] != ["-e"]:
            raise RuntimeError(
                f"the bridge's live-pi argv no longer ends with its extension (-e PATH): {argv}"
            )
        env = {**base_env(), **spec.env, **model.pi_env(), GATE_DIR_ENV: str(gate_dir)}
        super().__init__(model, argv if extension else argv[: -len(tail)], env)
        #: Per gate dialog answered: (read, answer written).
        self.answered: list[tuple[float, float]] = []

    def ready(self) -> None:
        """Wait until pi answers its first command."""
        start = len(self.lines)
        self.send({"id": "ready", "type": "set_auto_retry", "enabled": False})
        self.wait(lambda r: r.get("id") == "ready", start, 60)

    def on_records(self, now: float, records: list[dict[str, Any]]) -> None:
        for record in records:
            if record.get("type") == "extension_ui_request" and record.get("title") == GATE_MARKER:
                answer = {"type": "extension_ui_response", "id": record["id"], "value": ALLOW}
                self.answered.append((now, self.send(answer)))

    def session_id(self) -> str:
        """The id of pi's session (what the gate names its mode file by)."""
        start = len(self.lines)
        self.send({"id": "state", "type": "get_state"})
        self.wait(lambda r: r.get("id") == "state", start)
        state = next(r for _, r in self.lines[start:] if r.get("id") == "state")
        return str(state["data"]["sessionId"])

    def turn(self, scenario: str) -> tuple[float, float]:
        """Switch to `scenario`, then one prompt: (written → agent_settled, and for a tool turn
        tool_execution_start → its first tool_execution_update: the `tool_call` hooks and the
        command's start, without the model's streaming; 0 for a text turn), in seconds."""
        start = len(self.lines)
        self.send({"id": f"m-{scenario}", "type": "set_model", "provider": PROVIDER, "modelId": scenario})
        self.wait(lambda r: r.get("id") == f"m-{scenario}", start)
        start = len(self.lines)
        sent = self.send({"type": "prompt", "message": PROMPT})
        settled = self.wait(lambda r: r.get("type") == "agent_settled", start)
        events = {r.get("type"): at for at, r in reversed(self.lines[start:])}  # the first of each
        if scenario != "tool":
            return settled - sent, 0.0
        if "tool_execution_update" not in events or "tool_execution_start" not in events:
            raise RuntimeError("the tool turn ran no tool")
        return settled - sent, events["tool_execution_update"] - events["tool_execution_start"]


def _figure(with_: list[float], without: list[float]) -> dict[str, Any]:
    with_ms, without_ms = ms(median(with_)), ms(median(without))
    return {
        "with_ms": with_ms,
        "without_ms": without_ms,
        "added_ms": with_ms - without_ms,
        "paired_ms": ms(median([a - b for a, b in zip(with_, without, strict=True)])),
        "raw_with_ms": [round(ms(t), 2) for t in with_],
        "raw_without_ms": [round(ms(t), 2) for t in without],
    }


def _extension_trials(pis: dict[str, GatedPi], trials: int, times: dict[str, dict[str, list[float]]]) -> None:
    """One unmeasured turn of each kind per pi, then `trials` alternating ones."""
    for pi in pis.values():
        for kind in KINDS:
            pi.turn(kind)
    for trial in range(trials):
        order = ("with", "without") if trial % 2 == 0 else ("without", "with")
        for kind in KINDS:
            for name in order:
                total, hook = pis[name].turn(kind)
                times[kind][name].append(total)
                if kind == "tool":
                    times["hook"][name].append(hook)
        times["hook"]["ask"].append(pis["ask"].turn("tool")[1])


def extension_cost(model: ModelEnv, trials: int) -> dict[str, Any]:
    """Figure 1: per kind, the turn's median with and without the extension, and for the tool turn
    the segment that holds the `tool_call` hook (ms)."""
    times: dict[str, dict[str, list[float]]] = {kind: {"with": [], "without": []} for kind in KINDS}
    times["hook"] = {"with": [], "without": [], "ask": []}
    with tempfile.TemporaryDirectory(prefix="pi-bench-gate-") as gate_dir:
        pis = {
            "with": GatedPi(model, Path(gate_dir), extension=True),
            "without": GatedPi(model, Path(gate_dir), extension=False),
            "ask": GatedPi(model, Path(gate_dir), extension=True),
        }
        try:
            for pi in pis.values():  # started together, so they load side by side
                pi.ready()
            (Path(gate_dir) / pis["ask"].session_id()).write_text("ask")
            _extension_trials(pis, trials, times)
        finally:
            for pi in pis.values():
                pi.close()
    out: dict[str, Any] = {"trials": trials}
    for kind, figures in times.items():
        out[kind] = _figure(figures["with"], figures["without"])
    if len(pis["ask"].answered) != trials + 1:
        raise RuntimeError(f"{len(pis['ask'].answered)} gate dialogs for {trials + 1} tool turns in `ask`")
    asked = pis["ask"].answered[1:]
    answer_ms = ms(median([written - read for read, written in asked]))
    ask_ms = ms(median(times["hook"]["ask"]))
    # pi's own part of one approval: the gate's dialog out and its answer back, no bridge between.
    out["pi_ask"] = {
        "ask_ms": ask_ms,
        "client_answer_ms": answer_ms,
        "pi_ms": ask_ms - out["hook"]["with_ms"] - answer_ms,
        "raw_ask_ms": [round(ms(t), 2) for t in times["hook"]["ask"]],
    }
    return out


# --------------------------------------------------------------------------- 2. one approval


class ApprovingClient(LspClient):
    """The bench's LSP client, answering every pi/requestPermission allow-once on its reader thread."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str) -> None:
        #: Per request: (read, answer written) on this client's clock.
        self.answered: list[tuple[float, float]] = []
        super().__init__(argv, env=env, cwd=cwd)

    def received(self, now: float, bodies: list[bytes]) -> None:
        rest = []
        for body in bodies:
            if b"pi/requestPermission" in body:  # the server spaces its JSON as it likes: parse
                request: Message = orjson.loads(body)
                if request.get("method") == "pi/requestPermission" and "id" in request:
                    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"optionId": ALLOW_ONCE}}
                    self.answered.append((now, self.send(answer)))
                    continue
            rest.append(body)
        super().received(now, rest)


def _tool_run(
    client: ApprovingClient, model: ModelEnv, run_id: str, session: str, mode: str
) -> tuple[float, float]:
    """One `tool` turn of the conversation in `mode`: (pi/run sent → answered, and `tool.call` read
    → the first `tool.update` read: the approval, if any, and the command's start), in seconds."""
    start = len(client.messages)
    params = {**run_params(model, "tool", run_id, session), "mode": mode}
    msg_id, sent = client.request("pi/run", params)
    answered, answer = client.wait_response(msg_id, 60)
    result = answer.get("result") or {}
    if result.get("status") != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {answer}")
    first: dict[str, float] = {}
    for at, message in client.messages[start:]:
        first.setdefault(message["params"]["type"], at)
    if "tool.completed" not in first or ("permission.requested" in first) != (mode == "ask"):
        raise RuntimeError(f"run {run_id} ({mode}): unexpected stream {sorted(first)}")
    return answered - sent, first["tool.update"] - first["tool.call"]


def approval_cost(model: ModelEnv, trials: int) -> dict[str, Any]:
    """Figure 2: the tool turn in `ask` and in `full`, alternating, and the client's answer time (ms)."""
    times: dict[str, dict[str, list[float]]] = {
        "turn": {"ask": [], "full": []},
        "tool": {"ask": [], "full": []},
    }
    with tempfile.TemporaryDirectory(prefix="pi-bench-state-") as state:
        env = {**base_env(), STATE_DIR_ENV: state}
        client = ApprovingClient(bridge_argv(), env=env, cwd=str(model.workdir))
        try:
            # Checkpoints off: this figure is the approval's own (what a checkpoint adds to a
            # turn's first tool is bench/suites/checkpoints.py's).
            client.initialize(
                {"piCommand": ["pi"], "env": model.pi_env(), "checkpoints": False},
                root_uri=model.workdir.as_uri(),
                capabilities=PERMISSIONS,
            )
            first_id, _ = client.request("pi/run", run_params(model, "text", "gate-0"))
            session = str((client.wait_response(first_id, 60)[1].get("result") or {})["sessionId"])
            # Unmeasured in the trials; the bridge's first approval is reported apart.
            first_ask = _tool_run(client, model, "gate-warm-ask", session, "ask")[1]
            _tool_run(client, model, "gate-warm-full", session, "full")
            client.answered.clear()
            for trial in range(trials):
                order = ("ask", "full") if trial % 2 == 0 else ("full", "ask")
                for mode in order:
                    turn, tool = _tool_run(client, model, f"gate-{trial}-{mode}", session, mode)
                    times["turn"][mode].append(turn)
                    times["tool"][mode].append(tool)
        finally:
            client.close()
    if len(client.answered) != trials:
        raise RuntimeError(f"{len(client.answered)} approvals for {trials} ask turns")
    answer = [written - read for read, written in client.answered]
    client_ms = ms(median(answer))
    out: dict[str, Any] = {
        "trials": trials,
        "client_answer_ms": client_ms,
        "client_answer_max_ms": ms(max(answer)),
        "first_ask_tool_ms": ms(first_ask),
    }
    for part, figures in times.items():
        ask_ms, full_ms = ms(median(figures["ask"])), ms(median(figures["full"]))
        out[part] = {
            "ask_ms": ask_ms,
            "full_ms": full_ms,
            "bridge_ms": ask_ms - full_ms - client_ms,
            "raw_ask_ms": [round(ms(t), 2) for t in figures["ask"]],
            "raw_full_ms": [round(ms(t), 2) for t in figures["full"]],
        }
    return out


def run(turns: int, approvals: int) -> dict[str, Any]:
    """Both figures, on one scripted model."""
    with scripted_model() as model:
        return {"extension": extension_cost(model, turns), "approval": approval_cost(model, approvals)}


def summary(res: dict[str, Any]) -> list[str]:
    """One line per figure."""
    ext, app = res["extension"], res["approval"]
    lines = []
    for kind, label in (("tool", "tool turn"), ("text", "text turn"), ("hook", "tool start → first output")):
        f = ext[kind]
        lines.append(
            f"gate, full mode, {label}: with the extension {f['with_ms']:.2f} ms, without "
            f"{f['without_ms']:.2f} ms: {f['added_ms']:+.2f} ms ({ext['trials']} trials)"
        )
    p = ext["pi_ask"]
    lines.append(
        f"gate, one approval answered by a raw rpc client (no bridge), tool start → first output: "
        f"{p['ask_ms']:.2f} ms, client {p['client_answer_ms']:.3f} ms: pi's part {p['pi_ms']:+.2f} ms"
    )
    for part, label in (("turn", "tool turn"), ("tool", "tool.call → first tool.update")):
        f = app[part]
        lines.append(
            f"gate, one approval, {label}: ask {f['ask_ms']:.2f} ms, full {f['full_ms']:.2f} ms, client "
            f"{app['client_answer_ms']:.3f} ms: bridge {f['bridge_ms']:+.2f} ms ({app['trials']} trials)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gate", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40, help="alternating trials of figure 1")
    parser.add_argument("--approvals", type=int, default=40, help="alternating trials of figure 2")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    res = run(args.turns, args.approvals)
    print("\n".join(summary(res)))
    print(json.dumps({k: {n: v for n, v in f.items() if not n.startswith("raw")} for k, f in res.items()}))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
