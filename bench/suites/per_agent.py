"""Per agent (pi, Claude Code): time to first message and throughput through the bridge, each
against its own raw CLI as the floor, measured in the same invocation against the scripted model."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.clients.lsp import LspClient
from bench.common import ROOT, base_env, bridge_argv, median, ms
from bench.model import PROVIDER, ModelEnv, scripted_model
from bridge import agents
from bridge.agents.values import RunOptions
from bridge.scripted_model import LONG_DEFAULT

CLAUDE_BIN = ROOT / ".tools-claude" / "node_modules" / ".bin" / "claude"
PROMPT = "Say hello"
TEXT_DELTA = {"pi": b'"text_delta"', "claude": b'"text_delta"'}


def agent_env(model: ModelEnv, claude_dir: Path) -> dict[str, str]:
    """Both agents pointed at the scripted model."""
    return {
        **model.pi_env(),
        "ANTHROPIC_BASE_URL": model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(claude_dir),
    }


def command_of(agent: str) -> tuple[str, ...]:
    return (str(CLAUDE_BIN),) if agent == "claude" else ("pi",)


def run_params(agent: str, model: ModelEnv, scenario: str, run_id: str) -> dict[str, Any]:
    params: dict[str, Any] = {"prompt": PROMPT, "cwd": str(model.workdir), "model": scenario}
    params.update({"runId": run_id, "agent": agent})
    if agent == "pi":
        params["provider"] = PROVIDER
    return params


def bridge_run(
    client: LspClient, agent: str, model: ModelEnv, scenario: str, run_id: str
) -> tuple[float, float]:
    """(to the first assistant message, to the answer), seconds."""
    start = len(client.messages)
    msg_id, sent = client.request("pi/run", run_params(agent, model, scenario, run_id))
    _, first, _ = client.wait_message(
        lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == "assistant", start, 120
    )
    answered, answer = client.wait_response(msg_id, 120)
    if (answer.get("result") or {}).get("status") != "completed":
        raise RuntimeError(f"{agent} run {run_id} did not complete: {answer}")
    return first - sent, answered - sent


def raw_run(agent: str, model: ModelEnv, scenario: str, env: dict[str, str]) -> tuple[float, float]:
    """The raw CLI with the bridge's own launch: (to its first text delta, to its exit), seconds."""
    adapter = agents.build_adapter(agent)
    options = RunOptions(
        prompt=PROMPT, cwd=str(model.workdir), provider=PROVIDER if agent == "pi" else None, model=scenario
    )
    spec = adapter.launch_spec(command_of(agent), options)
    started = time.monotonic()
    proc = subprocess.Popen(
        spec.argv,
        cwd=spec.cwd,
        env={**env, **spec.env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(spec.stdin)
    proc.stdin.close()
    first = None
    for line in proc.stdout:
        if first is None and TEXT_DELTA[agent] in line:
            first = time.monotonic() - started
    proc.wait(120)
    if first is None:
        raise RuntimeError(f"raw {agent} printed no text delta")
    return first, time.monotonic() - started


def measure(agent: str, model: ModelEnv, env: dict[str, str], trials: int, deltas: int) -> dict[str, Any]:
    """One agent's figures: bridge and raw floor, first message and throughput."""
    client = LspClient(bridge_argv(), env=env, cwd=str(ROOT))
    client.initialize(
        {"agents": {agent: list(command_of(agent))}, "env": agent_env(model, Path(env["CLAUDE_CONFIG_DIR"]))}
    )
    # pi runs only the models its configuration lists: `long` and a few `long-N`
    scenario = "long" if deltas == LONG_DEFAULT else f"long-{deltas}"
    try:
        bridge_run(client, agent, model, "text", f"{agent}-warmup")
        raw_run(agent, model, "text", env)
        b_first, b_total, r_first, r_total = [], [], [], []
        for trial in range(trials):
            time.sleep(1.0)  # as between two prompts: the previous agent has exited
            b_first.append(bridge_run(client, agent, model, "text", f"{agent}-ttfm-{trial}")[0])
            r_first.append(raw_run(agent, model, "text", env)[0])
            b_total.append(bridge_run(client, agent, model, scenario, f"{agent}-long-{trial}")[1])
            r_total.append(raw_run(agent, model, scenario, env)[1])
    finally:
        client.close()
    return {
        "agent": agent,
        "firstMessageMs": {"bridge": ms(median(b_first)), "rawCli": ms(median(r_first))},
        "longRunMs": {"bridge": ms(median(b_total)), "rawCli": ms(median(r_total))},
        "deltasPerSecond": {"bridge": deltas / median(b_total), "rawCli": deltas / median(r_total)},
        "ratioFirstMessage": median(b_first) / median(r_first),
        "ratioLongRun": median(b_total) / median(r_total),
        "trials": trials,
        "deltas": deltas,
    }


def _follow_up_first(client: LspClient, model: ModelEnv, trials: int, tag: str) -> float:
    """The median time to the first message of a conversation's follow-ups on this bridge."""
    first, times = None, []
    for trial in range(trials + 1):
        params = run_params("claude", model, "text", f"{tag}-{trial}")
        if first is not None:
            params["sessionId"] = first
        start = len(client.messages)
        msg_id, sent = client.request("pi/run", params)
        run_id = params["runId"]
        _, at, _ = client.wait_message(
            lambda m, run_id=run_id: m["params"]["runId"] == run_id and m["params"]["type"] == "assistant",
            start,
            120,
        )
        _, answer = client.wait_response(msg_id, 120)
        first = first or answer["result"]["sessionId"]
        if trial:  # the first prompt starts the conversation: not a follow-up
            times.append(at - sent)
    return median(times)


def follow_ups(model: ModelEnv, env: dict[str, str], trials: int) -> dict[str, Any]:
    """Claude Code's follow-up, live (the server's agent, and chosen per run on a pi bridge)
    against a process per prompt (the one-process engine) and a raw spawn (one invocation)."""
    options = {
        "agents": {"claude": list(command_of("claude"))},
        "env": agent_env(model, Path(env["CLAUDE_CONFIG_DIR"])),
    }
    ways = (
        ("live", [*bridge_argv(), "--agent", "claude"], {}),
        ("chosenPerRun", bridge_argv(), {}),
        ("perPrompt", bridge_argv(), {"engine": "json"}),
    )
    figures = {}
    for engine, argv, engine_options in ways:
        path = f"{CLAUDE_BIN.parent}{os.pathsep}{env.get('PATH', '')}"
        client = LspClient(argv, env={**env, "PATH": path}, cwd=str(ROOT))
        client.initialize({**options, **engine_options})
        try:
            figures[engine] = _follow_up_first(client, model, trials, f"follow-{engine}")
        finally:
            client.close()
    raw = median([raw_run("claude", model, "text", env)[0] for _ in range(trials)])
    return {
        "agent": "claude",
        "followUpFirstMessageMs": {
            "live": ms(figures["live"]),
            "chosenPerRun": ms(figures["chosenPerRun"]),
            "perPrompt": ms(figures["perPrompt"]),
            "rawCli": ms(raw),
        },
        "perPromptOverLive": figures["perPrompt"] / figures["live"],
        "trials": trials,
    }


def run(trials: int, deltas: int, names: list[str]) -> list[dict[str, Any]]:
    """Each named agent's figures (Claude Code skipped, with a line, when not installed)."""
    results = []
    with scripted_model() as model:
        claude_dir = model.workdir.parent / "claude-config"
        claude_dir.mkdir(exist_ok=True)
        env = {**base_env(), **agent_env(model, claude_dir)}
        for agent in names:
            if agent == "claude" and not CLAUDE_BIN.exists():
                print("claude: not installed in .tools-claude, skipped")
                continue
            results.append(measure(agent, model, env, trials, deltas))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench per_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--agents", default="pi,claude")
    parser.add_argument(
        "--follow-up", action="store_true", help="only Claude Code's follow-up: live, per prompt, raw"
    )
    args = parser.parse_args(argv)
    if args.follow_up:
        with scripted_model() as model:
            claude_dir = model.workdir.parent / "claude-config"
            claude_dir.mkdir(exist_ok=True)
            results = [follow_ups(model, {**base_env(), **agent_env(model, claude_dir)}, args.trials)]
    else:
        results = run(args.trials, args.deltas, args.agents.split(","))
    for result in results:
        print(json.dumps(result))
    print(
        f"# {os.cpu_count()} cores; medians of {args.trials} trials; same invocation for bridge and raw CLI"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
