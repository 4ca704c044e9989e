"""The rpc engine (live conversations) against raw `pi --mode rpc` and the json engine, one invocation.

python -m bench conversation [--trials N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import procs
from bench.clients.acp import AcpClient
from bench.clients.lsp import LspClient
from bench.clients.pi_rpc import PiRpc
from bench.common import PI_ACP, base_env, bridge_argv, ensure_pi_acp, median, ms
from bench.model import DEAD_REGISTRY, PROVIDER, ModelEnv, scripted_model
from bench.suites.sidebyside import ACP_INIT, acp_prompt, set_acp_model
from bench.trace_marks import Marks, first_mark, last_mark, read_marks, trace_env

PROMPT = "Say hello"
# Between "ready to take a first prompt" and that prompt, for every subject alike.
FIRST_PROMPT_PAUSE = 1.0


def _start(model: ModelEnv, engine: str, trace: Path | None = None) -> LspClient:
    client = LspClient(bridge_argv(), env=trace_env(base_env(), trace), cwd=str(model.workdir))
    initialize_like_an_editor(client, model, engine)
    return client


def initialize_like_an_editor(client: LspClient, model: ModelEnv, engine: str) -> None:
    """initialize (the workspace as root, pi on the scripted model, `engine`) and initialized."""
    msg_id, _ = client.request(
        "initialize",
        {
            "processId": None,
            "rootUri": model.workdir.as_uri(),
            "capabilities": {},
            "initializationOptions": {"piCommand": ["pi"], "env": model.pi_env(), "engine": engine},
        },
    )
    client.wait_response(msg_id, 60)
    client.notify("initialized", {})


def _runs(client: LspClient) -> dict[str, Any]:
    msg_id, _ = client.request("pi/runs", None)
    result: dict[str, Any] = client.wait_response(msg_id, 30)[1].get("result") or {}
    return result


def wait_spare(client: LspClient, timeout: float = 30.0) -> float:
    started = time.perf_counter()
    while not _runs(client).get("warmPids"):
        if time.perf_counter() - started > timeout:
            raise RuntimeError("no spare pi within 30 s")
        time.sleep(0.01)
    return time.perf_counter()


def timed_prompt(
    client: LspClient, model: ModelEnv, run_id: str, scenario: str, session: str | None
) -> tuple[float, float, dict[str, Any]]:
    """The prompt's time to its first `assistant` message and to its answer (s), and the answer."""
    sent, first, answered, result = prompt_at(client, model, run_id, scenario, session)
    return first - sent, answered - sent, result


def prompt_at(
    client: LspClient, model: ModelEnv, run_id: str, scenario: str, session: str | None
) -> tuple[float, float, float, dict[str, Any]]:
    """One prompt: when it was sent, its first `assistant` message came and its answer came
    (`time.perf_counter`), and the answer."""
    params: dict[str, Any] = {
        "prompt": PROMPT,
        "cwd": str(model.workdir),
        "provider": PROVIDER,
        "model": scenario,
        "runId": run_id,
    }
    if session:
        params["sessionId"] = session
    start = len(client.messages)
    msg_id, sent = client.request("pi/run", params)
    _, first, _ = client.wait_message(
        lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == "assistant", start, 60
    )
    answered, answer = client.wait_response(msg_id, 60)
    return sent, first, answered, answer.get("result") or {}


def own_share(marks: Marks, sent: float, first: float) -> float | None:
    """The bridge's own part of a prompt's time to its first message (s): all of it but pi's,
    from the prompt handed to pi's stdin to the line of pi's event read (None: not in the trace)."""
    written = first_mark(marks, "engine.prompt", sent, first)
    line = last_mark(marks, "pi.out", written or first, first)
    if written is None or line is None:
        return None
    return (written - sent) + (first - line)


def own_cancel_share(marks: Marks, sent: float, answered: float) -> float | None:
    """The bridge's own part of a cancel (s): all of it but pi's, from the token set (its abort
    written in the same step) to pi's answer read (None: not in the trace)."""
    token = first_mark(marks, "cancel.token", sent, answered)
    settled = first_mark(marks, "cancel.agent_answered", token or answered, answered)
    if token is None or settled is None:
        return None
    return (answered - sent) - (settled - token)


def bridge_trial(model: ModelEnv, engine: str, consecutive: int) -> dict[str, Any]:
    """One bridge's figures (seconds, bytes); the rpc engine's own shares too, off its trace."""
    with tempfile.TemporaryDirectory(prefix="pi-bench-trace-") as scratch:
        trace = Path(scratch) / "trace.json" if engine == "rpc" else None
        times: dict[str, Any] = {}
        out = _bridge_figures(model, engine, consecutive, trace, times)
        if trace is not None:
            out.update(_own_shares(read_marks(trace, 5.0), times))
    return out


def _own_shares(marks: Marks, times: dict[str, Any]) -> dict[str, float]:
    """The bridge's own share of the first prompt, the follow-ups (their median) and the cancel."""
    shares: dict[str, float] = {}
    first = own_share(marks, *times["first"])
    nexts = [share for sent, at in times["next"] if (share := own_share(marks, sent, at)) is not None]
    cancel = own_cancel_share(marks, *times["cancel"]) if "cancel" in times else None
    if first is not None:
        shares["own_first_prompt"] = first
    if nexts:
        shares["own_next_prompt"] = median(nexts)
    if cancel is not None:
        shares["own_cancel"] = cancel
    return shares


def _bridge_figures(
    model: ModelEnv, engine: str, consecutive: int, trace: Path | None, times: dict[str, Any]
) -> dict[str, Any]:
    """The figures of one bridge (`trace`: its trace file); `times` gets each prompt's (sent,
    first message) and the cancel's (sent, answered), on the bridge's trace clock."""
    out: dict[str, Any] = {}
    client = _start(model, engine, trace)
    try:
        ready = client.responses[1][0]
        if engine == "rpc":
            out["initialize_to_spare_ready"] = wait_spare(client) - ready
        time.sleep(FIRST_PROMPT_PAUSE)
        sent, first, answered, result = prompt_at(client, model, "c-1", "text", None)
        out["first_prompt_first"], out["first_prompt_total"] = first - sent, answered - sent
        times["first"], times["next"] = (sent, first), []
        session = result["sessionId"]
        firsts, totals = [], []
        for index in range(consecutive):
            time.sleep(0.3 if engine == "rpc" else 2.0)  # the json engine's warm resume needs time to load
            sent, first, answered, _ = prompt_at(client, model, f"c-{index + 2}", "text", session)
            firsts.append(first - sent)
            totals.append(answered - sent)
            times["next"].append((sent, first))
        out["next_prompt_first"], out["next_prompt_total"] = median(firsts), median(totals)
        if engine == "rpc":
            live = _runs(client)["live"]
            out["idle_live_pi_rss"] = procs.status_kb(live[0]["pid"], "VmRSS") * 1024 if live else 0
            start = len(client.messages)
            params = {
                "prompt": PROMPT,
                "cwd": str(model.workdir),
                "provider": PROVIDER,
                "model": "toolslow",
                "runId": "c-tool",
                "sessionId": session,
            }
            run_msg, _ = client.request("pi/run", params)
            client.wait_message(
                lambda m: m["params"]["runId"] == "c-tool" and m["params"]["type"] == "tool.call", start, 60
            )
            procs.wait_for_process(client.pid, "sleep 30")
            tree = [p for p in procs.descendants(client.pid) if "sleep" in procs.cmdline(p)]
            _, sent = client.request("pi/cancel", {"runId": "c-tool"})
            answered, _ = client.wait_response(run_msg, 30)
            out["cancel_mid_tool"] = answered - sent
            times["cancel"] = (sent, answered)
            out["left_after_cancel"] = len(procs.still_alive(tree))
    finally:
        client.close()
    return out


def raw_trial(model: ModelEnv, consecutive: int) -> dict[str, Any]:
    """Raw pi's figures (seconds)."""
    out: dict[str, Any] = {}
    raw = PiRpc(model)
    try:
        raw.send({"id": "r1", "type": "set_auto_retry", "enabled": False})
        out["spawn_to_ready"] = raw.wait(lambda r: r.get("id") == "r1", 0) - raw.spawned
        time.sleep(FIRST_PROMPT_PAUSE)
        out["first_prompt_first"], out["first_prompt_total"] = raw.prompt(PROMPT)
        firsts, totals = [], []
        for _ in range(consecutive):
            time.sleep(0.3)
            first, total = raw.prompt(PROMPT)
            firsts.append(first)
            totals.append(total)
        out["next_prompt_first"], out["next_prompt_total"] = median(firsts), median(totals)
        start = len(raw.lines)
        raw.send({"id": "m", "type": "set_model", "provider": PROVIDER, "modelId": "toolslow"})
        raw.wait(lambda r: r.get("id") == "m", start)
        start = len(raw.lines)
        raw.send({"type": "prompt", "message": PROMPT})
        raw.wait(lambda r: r.get("type") == "tool_execution_update", start)
        procs.wait_for_process(raw.proc.pid, "sleep 30")
        start = len(raw.lines)
        sent = raw.send({"id": "a", "type": "abort"})
        out["abort_mid_tool"] = raw.wait(lambda r: r.get("id") == "a", start) - sent
    finally:
        raw.close()
    return out


def pi_acp_trial(model: ModelEnv, consecutive: int) -> dict[str, Any]:
    """pi-acp's figures (seconds): the same prompts through its own long-lived pi."""
    out: dict[str, Any] = {}
    env = {**base_env(), **model.pi_env(), "npm_config_registry": DEAD_REGISTRY}
    client = AcpClient(["node", str(PI_ACP)], env=env, cwd=str(model.workdir))
    tree: list[Any] = []
    try:
        client.call("initialize", ACP_INIT)
        sent, answered, new = client.call("session/new", {"cwd": str(model.workdir), "mcpServers": []})
        out["session_new"] = answered - sent
        session = new["result"]["sessionId"]
        time.sleep(FIRST_PROMPT_PAUSE)
        sent, first, answered, _ = acp_prompt(client, session, PROMPT)
        out["first_prompt_first"], out["first_prompt_total"] = first - sent, answered - sent
        firsts, totals = [], []
        for _ in range(consecutive):
            time.sleep(0.3)
            sent, first, answered, _ = acp_prompt(client, session, PROMPT)
            firsts.append(first - sent)
            totals.append(answered - sent)
        out["next_prompt_first"], out["next_prompt_total"] = median(firsts), median(totals)
        set_acp_model(client, session, "toolslow")
        start = len(client.updates)
        msg_id, _ = client.request(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": PROMPT}]}
        )
        client.wait_update(lambda u: u.get("sessionUpdate") == "tool_call", start, 60)
        procs.wait_for_process(client.pid, "sleep 30")
        tree = [p for p in procs.descendants(client.pid) if "sleep" in procs.cmdline(p)]
        sent = client.notify("session/cancel", {"sessionId": session})
        answered, answer = client.wait_response(msg_id, 30)
        if (answer.get("result") or {}).get("stopReason") != "cancelled":
            raise RuntimeError(f"pi-acp did not answer the cancel as cancelled: {answer}")
        out["cancel_mid_tool"] = answered - sent
        out["left_after_cancel"] = len(procs.still_alive(tree))
    finally:
        everything = procs.descendants(client.pid)
        client.close()
        for proc in procs.still_alive(everything + tree):
            proc.kill()
    return out


def _medians(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the trials that have it (a trace may miss a mark)."""
    keys = dict.fromkeys(key for trial in trials for key in trial)
    return {key: median([float(t[key]) for t in trials if key in t]) for key in keys}


def run(trials: int, consecutive: int = 5) -> dict[str, Any]:
    """Every figure's median over `trials`, alternating the three subjects."""
    with_pi_acp = ensure_pi_acp()
    rpc, raw, json_engine, pi_acp = [], [], [], []
    with scripted_model() as model:
        for _ in range(trials):
            rpc.append(bridge_trial(model, "rpc", consecutive))
            raw.append(raw_trial(model, consecutive))
            if with_pi_acp:
                pi_acp.append(pi_acp_trial(model, consecutive))
            json_engine.append(bridge_trial(model, "json", consecutive))
    results = {"rpc": _medians(rpc), "raw": _medians(raw), "json": _medians(json_engine)}
    if pi_acp:
        results["pi_acp"] = _medians(pi_acp)
    return results


def _pretty(results: dict[str, Any]) -> dict[str, Any]:
    pretty: dict[str, Any] = {}
    for subject, figures in results.items():
        pretty[subject] = {
            key: (
                round(value / 1e6, 1)
                if key.endswith("rss")
                else value
                if key.startswith("left")
                else round(ms(value), 2)
            )
            for key, value in figures.items()
        }
    return pretty


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench conversation", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="also write the raw medians (JSON) here")
    args = parser.parse_args()
    results = run(args.trials)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(_pretty(results), indent=2))


if __name__ == "__main__":
    main()
