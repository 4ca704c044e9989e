"""Benchmarks 2, 3 and 4 against the real pi (and the scripted model): first message, cancel, start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import psutil

from bench import agents as stand_ins
from bench import procs
from bench.clients.lsp import LspClient
from bench.common import ROOT, base_env, bridge_argv
from bench.model import PROVIDER, ModelEnv

PROMPT = "Say hello"


def start_bridge(
    model: ModelEnv, options: dict[str, Any] | None = None, *, workspace: bool = False
) -> LspClient:
    """A bridge initialized to run the real pi against the scripted model; `workspace`: with
    rootUri = the runs' folder, as an editor opened on it starts it."""
    client = LspClient(bridge_argv(), env=base_env(), cwd=str(ROOT))
    root = model.workdir.as_uri() if workspace else None
    client.initialize({"piCommand": ["pi"], "env": model.pi_env(), **(options or {})}, root_uri=root)
    return client


def run_params(model: ModelEnv, scenario: str, run_id: str, session: str | None = None) -> dict[str, Any]:
    """pi/run params for one scripted scenario (`session`: a prompt of that conversation)."""
    params = {
        "prompt": PROMPT,
        "cwd": str(model.workdir),
        "provider": PROVIDER,
        "model": scenario,
        "runId": run_id,
    }
    if session:
        params["sessionId"] = session
    return params


@dataclass
class RunTiming:
    """pi/run sent → first assistant message, and → answered."""

    first: float
    total: float
    text: str
    first_event: float = 0.0
    session_id: str | None = None


def timed_run(
    client: LspClient,
    model: ModelEnv,
    scenario: str,
    run_id: str,
    timeout: float = 120,
    session: str | None = None,
) -> RunTiming:
    """One pi/run, timed from the request to the first `assistant` message and to the answer."""
    start = len(client.messages)
    msg_id, sent = client.request("pi/run", run_params(model, scenario, run_id, session))
    _, first_event, _ = client.wait_message(lambda m: m["params"]["runId"] == run_id, start, timeout)
    _, first, _ = client.wait_message(
        lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == "assistant", start, timeout
    )
    answered, answer = client.wait_response(msg_id, timeout)
    result = answer.get("result") or {}
    if result.get("status") != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {answer}")
    return RunTiming(
        first - sent, answered - sent, result.get("text", ""), first_event - sent, result.get("sessionId")
    )


def first_message(
    model: ModelEnv, *, warm: bool, trials: int, pause: float
) -> tuple[list[RunTiming], list[tuple[int, int]]]:
    """Time to first message with the warm pool on or off; one unmeasured run first, then `trials`.

    Between runs the client pauses `pause` seconds (both modes alike): time for pi to exit and,
    with the pool, for the next pi to be spawned and loaded, as between two prompts of a user.
    Also returns the pool's memory and size before each run, as `pi/runs` reports them
    (warmRssBytes, len(warmPids)).
    """
    client = start_bridge(model, {"warmPool": warm})
    try:
        timed_run(client, model, "text", f"ttfm-{warm}-warmup")
        timings, pool_rss = [], []
        for trial in range(trials):
            time.sleep(pause)
            runs_msg, _ = client.request("pi/runs", None)
            _, runs = client.wait_response(runs_msg, 30)
            listing = runs.get("result") or {}
            # The idle pre-spawned pis alone: warmRssBytes also counts the live conversations'
            # pis, which each of these runs (a new conversation) leaves until they idle out.
            warm_pids = listing.get("warmPids", [])
            rss = sum(procs.status_kb(pid, "VmRSS") * 1024 for pid in warm_pids)
            pool_rss.append((rss, len(warm_pids)))
            timings.append(timed_run(client, model, "text", f"ttfm-{warm}-{trial}"))
        return timings, pool_rss
    finally:
        client.close()


@dataclass
class CancelTrial:
    """pi/cancel sent → pi/run answered -32800, and what was left alive."""

    latency: float
    cancel_answer: float
    code: int
    stage: str
    pids: int
    left: int
    survivors_in_receipt: int
    receipt_ms: float = 0.0


def _new_since(tree: list[psutil.Process], bridge_pid: int) -> list[psutil.Process]:
    """The bridge's descendants that were not in `tree`, less the bridge's own fresh spawns: a new
    child of the bridge caught between its fork and its exec (its command line is still the
    bridge's, or empty) is the next agent the bridge starts, not a process of the cancelled run.
    An orphan of the run, which the bridge adopts as a subreaper, has its own command line."""
    before = {proc.pid for proc in tree}
    bridge_argv = procs.cmdline(psutil.Process(bridge_pid))
    found = []
    for proc in procs.descendants(bridge_pid):
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if proc.pid in before:
            continue
        if parent == bridge_pid and procs.cmdline(proc) in ("", bridge_argv):
            continue
        found.append(proc)
    return found


def _agents_kept(client: LspClient) -> set[int]:
    """The pis the bridge keeps on purpose (live conversations, spares, the warm pool): not leftovers."""
    runs_msg, _ = client.request("pi/runs", {})
    _, answer = client.wait_response(runs_msg, 30)
    result = answer.get("result") or {}
    return {int(pid) for pid in result.get("warmPids", [])} | {int(c["pid"]) for c in result.get("live", [])}


def cancel_trials(model: ModelEnv, kind: str, trials: int) -> list[CancelTrial]:
    """Cancel `trials` runs: kind "stream" (pi, `slow`), "tool" (pi, `sleep 30`), "stubborn"."""
    options: dict[str, Any] = {"warmPool": False}
    if kind == "stubborn":
        options["piCommand"] = stand_ins.stubborn()
        options["engine"] = "json"  # it stands in for a one-shot pi; it speaks no rpc
    client = start_bridge(model, options)
    scenario = {"stream": "slow", "tool": "toolslow", "stubborn": "text"}[kind]
    results: list[CancelTrial] = []
    try:
        for trial in range(trials):
            run_id = f"cancel-{kind}-{trial}"
            start = len(client.messages)
            run_msg, _ = client.request("pi/run", run_params(model, scenario, run_id))
            wanted = "tool.call" if kind == "tool" else "assistant"
            client.wait_message(
                lambda m, run_id=run_id, wanted=wanted: (
                    m["params"]["runId"] == run_id and m["params"]["type"] == wanted
                ),
                start,
                60,
            )
            if kind == "tool" and not procs.wait_for_process(client.pid, "sleep 30"):
                raise RuntimeError("the bash tool's `sleep 30` never started")
            tree = procs.descendants(client.pid)
            cancel_msg, sent = client.request("pi/cancel", {"runId": run_id})
            answered, answer = client.wait_response(run_msg, 30)
            cancel_answered, cancel_answer = client.wait_response(cancel_msg, 30)
            error = answer.get("error") or {}
            receipt = (cancel_answer.get("result") or {}).get("shutdown") or {}
            kept = _agents_kept(client)
            left = [
                proc
                for proc in procs.still_alive(tree) + _new_since(tree, client.pid)
                if proc.pid not in kept and not procs.is_checkpoint_git(proc) and procs.alive(proc)
            ]  # alive again: a process that ended while it was looked at is no leftover
            results.append(
                CancelTrial(
                    latency=answered - sent,
                    cancel_answer=cancel_answered - sent,
                    code=int(error.get("code", 0)),
                    stage=str(receipt.get("stage")),
                    pids=len(receipt.get("pids", [])),
                    left=len({proc.pid for proc in left}),
                    survivors_in_receipt=len(receipt.get("survivors", [])),
                    receipt_ms=float(receipt.get("elapsedMs", 0.0)),
                )
            )
        return results
    finally:
        client.close()


def raw_sigterm_trials(model: ModelEnv, kind: str, trials: int) -> list[tuple[float, int]]:
    """The cancel baseline: pi started directly, SIGTERM sent by hand → pi exited.

    Same scenarios and moments as the bridge's trials ("stream": first text delta of `slow`;
    "tool": `sleep 30` running). Returns (seconds, processes of pi's tree still alive 0.1 s after).
    """
    env = {**base_env(), **model.pi_env()}
    scenario = "slow" if kind == "stream" else "toolslow"
    out = []
    for _ in range(trials):
        pi = subprocess.Popen(
            ["pi", "--mode", "json", "--provider", PROVIDER, "--model", scenario],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(model.workdir),
            start_new_session=True,
        )
        assert pi.stdin is not None and pi.stdout is not None
        pi.stdin.write(PROMPT.encode())
        pi.stdin.close()
        seen = b""
        needle = b"text_delta" if kind == "stream" else b"tool_execution_start"
        while needle not in seen:
            chunk = os.read(pi.stdout.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"pi ended before {needle!r}")
            seen = seen[-64:] + chunk
        if kind == "tool" and not procs.wait_for_process(pi.pid, "sleep 30"):
            raise RuntimeError("the bash tool's `sleep 30` never started")
        tree = procs.descendants(pi.pid)
        sent = time.perf_counter()
        pi.send_signal(signal.SIGTERM)
        pi.wait(10)
        exited = time.perf_counter() - sent
        pi.stdout.close()
        time.sleep(0.1)
        left = procs.still_alive(tree)
        for proc in left:  # ours: started by this pi
            proc.kill()
        out.append((exited, len(left)))
    return out


def startup(
    argv: list[str], trials: int, *, acp: bool = False, env: dict[str, str] | None = None
) -> list[float]:
    """Spawn → initialize answered, `trials` times (LSP framing, or ACP's newline JSON)."""
    from bench.clients.acp import AcpClient

    times = []
    for _ in range(trials):
        if acp:
            acp_client = AcpClient(argv, env=env or base_env())
            _, answered, _ = acp_client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            times.append(answered - acp_client.spawned_at)
            acp_client.close()
        else:
            client = LspClient(argv, env=env or base_env(), cwd=str(ROOT))
            answered, _ = client.initialize(None)
            times.append(answered - client.spawned_at)
            client.close()
    return times
