"""Each installed ACP agent of the catalog driven directly and through the bridge by the same ACP
client: a follow-up's first chunk and a cancel mid-command, interleaved in one invocation.

python -m bench acp_agents [--trials N] [--quick] [--agents a,b] [--write]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import procs
from bench.bridge_parts import CATALOG, STATE_DIR_ENV, AcpAgentSpec, model_value
from bench.clients.acp import AcpClient
from bench.clients.lsp import LspClient
from bench.common import NODE_BIN, PYTHON, ROOT, base_env
from bench.model import ModelEnv, scripted_model
from bench.report import acp_agents_section as report
from bench.suites import per_agent
from bench.trace_marks import first_mark, last_mark, read_marks, trace_env

#: Where scripts/setup.sh installs the ACP adapters and the other agents (git-ignored).
AGENT_BINS = (ROOT / ".tools-acp" / "node_modules" / ".bin", ROOT / ".tools-agents" / "node_modules" / ".bin")
#: The scripted scenario every prompt runs: bash with the prompt as its command, a text preamble first.
SCENARIO = "shell"
#: A command that runs 30 s (Claude Code refuses a standalone `sleep`).
SLOW_COMMAND = "echo waiting; sleep 30"
ACP_INIT = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
}
TIMEOUT = 120.0

Trial = dict[str, float]


def agent_path() -> str:
    """PATH with the agents, pi and node first."""
    return os.pathsep.join([*map(str, AGENT_BINS), str(NODE_BIN), os.environ.get("PATH", "")])


def installed(path: str) -> list[AcpAgentSpec]:
    """The catalog's agents whose executable is on `path`."""
    return [spec for spec in CATALOG.values() if shutil.which(spec.command[0], path=path)]


def absent() -> list[str]:
    """The catalog's agents not installed here (not measured)."""
    return sorted(set(CATALOG) - {spec.name for spec in installed(agent_path())})


def agent_env(spec: AcpAgentSpec, model: ModelEnv, tmp: Path) -> dict[str, str]:
    """The environment both ways run the agent in: pointed at the scripted model, on SCENARIO
    when the agent takes its model at launch (the others are told by session/set_config_option)."""
    env = {**base_env(), "PATH": agent_path(), STATE_DIR_ENV: str(tmp / "state")}
    if spec.model_server_env is not None:
        env.update(spec.model_server_env(model.base_url, tmp, spec.provider))
    if spec.model_env:
        env[spec.model_env] = SCENARIO
    return env


def scenario_value(spec: AcpAgentSpec, session: dict[str, Any]) -> str:
    """The id of SCENARIO among the models a session/new answer offers (each side lists them its
    own way), else the catalog's spelling of it."""
    options: dict[str, Any] = next(
        (o for o in session.get("configOptions") or [] if o.get("id") == "model"), {}
    )
    values: list[str] = []
    for choice in options.get("options") or []:  # a choice, or a group of them
        values += [c.get("value") for c in choice.get("options") or [choice]]
    found = [v for v in values if isinstance(v, str) and (v == SCENARIO or v.endswith("/" + SCENARIO))]
    return found[0] if found else model_value(spec, spec.provider, SCENARIO)


def _choose_scenario(client: AcpClient, spec: AcpAgentSpec, session: dict[str, Any]) -> None:
    """SCENARIO set by session/set_config_option, unless the session is on it already."""
    value = scenario_value(spec, session)
    options = [o for o in session.get("configOptions") or [] if o.get("id") == "model"]
    if options and options[0].get("currentValue") == value:
        return
    params = {"sessionId": session["sessionId"], "configId": "model", "value": value}
    _, _, answer = client.call("session/set_config_option", params, TIMEOUT)
    if "error" in answer:
        raise RuntimeError(f"{spec.name}: model {value} refused: {answer['error']}")


def _is_chunk(update: dict[str, Any]) -> bool:
    """Answer text (the bridge's own notes, such as a retry, carry `_meta.piBridge`)."""
    text = (update.get("content") or {}).get("text")
    meta = update.get("_meta") or {}
    return update.get("sessionUpdate") == "agent_message_chunk" and bool(text) and "piBridge" not in meta


def _command_processes(root_pid: int) -> list[Any]:
    """Once the slow command runs: its processes under `root_pid`."""
    if not procs.wait_for_process(root_pid, "sleep 30", timeout=TIMEOUT / 4):
        raise RuntimeError("the slow command never started")
    return [p for p in procs.descendants(root_pid) if "sleep" in procs.cmdline(p)]


def own_shares(trace: Path, times: dict[str, float], wait: float = 5.0) -> dict[str, float]:
    """The bridge's own part of the follow-up and of the cancel, read off its trace: all of the
    client's time but the agent's (from the prompt written to the line of the first chunk read;
    from the cancel's first stage, which writes it, to the prompt's answer read)."""
    marks = read_marks(trace, wait)
    shares: dict[str, float] = {}
    sent, first = times["follow_up_sent"], times["follow_up_first"]
    written = first_mark(marks, "engine.prompt", sent, first)
    line = last_mark(marks, "agent.out", written or first, first)
    if written is not None and line is not None:
        shares["own_follow_up"] = (written - sent) + (first - line)
    cancel_sent, answered = times["cancel_sent"], times["cancel_answered"]
    token = first_mark(marks, "cancel.token", cancel_sent, answered)
    agent_answer = first_mark(marks, "agent.answered", token or answered, answered)
    if token is not None and agent_answer is not None:
        shares["own_cancel"] = (answered - cancel_sent) - (agent_answer - token)
    return shares


def _kill_leftovers(started: list[Any]) -> None:
    """End, by pid, what this trial started and is still alive (an agent that leaves its command)."""
    for proc in procs.still_alive(started):
        try:
            proc.kill()
        except Exception:
            pass


def acp_trial(
    argv: list[str],
    spec: AcpAgentSpec,
    env: dict[str, str],
    cwd: Path,
    pause: float,
    trace: Path | None = None,
) -> Trial:
    """One ACP session: a first prompt, the timed follow-up `pause` s after its answer (as a
    user's next prompt comes), then the slow command cancelled; through a bridge (`trace`: its
    trace file), the bridge's own share of each too."""
    client = AcpClient(argv, env=env, cwd=str(cwd))
    started: list[Any] = []
    try:
        client.call("initialize", ACP_INIT, TIMEOUT)
        _, _, new = client.call("session/new", {"cwd": str(cwd), "mcpServers": []}, TIMEOUT)
        session = new["result"]["sessionId"]
        if not spec.model_env:
            _choose_scenario(client, spec, new["result"])

        def prompt(text: str) -> tuple[int, float, int]:
            start = len(client.updates)
            msg_id, sent = client.request(
                "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            )
            return msg_id, sent, start

        first_id, _, _ = prompt("echo first")
        client.wait_response(first_id, TIMEOUT)
        time.sleep(pause)
        msg_id, sent, start = prompt("echo follow-up")
        _, first, _ = client.wait_update(_is_chunk, start, TIMEOUT)
        client.wait_response(msg_id, TIMEOUT)
        asked = len(client.asked)
        msg_id, _, start = prompt(SLOW_COMMAND)
        # Gemini CLI announces a shell call only by asking (the client allows it), and sends no
        # update of it until it ends: the call is under way once either came.
        tools = ("tool_call", "tool_call_update")
        client.wait_until(
            lambda: (
                len(client.asked) > asked
                or any(u.get("sessionUpdate") in tools for _, u in client.updates[start:])
            ),
            TIMEOUT,
        )
        tree = _command_processes(client.pid)
        started = procs.descendants(client.pid)
        cancel_sent = client.notify("session/cancel", {"sessionId": session})
        answered, answer = client.wait_response(msg_id, TIMEOUT)
        left = len(procs.still_alive(tree))
        if (answer.get("result") or {}).get("stopReason") != "cancelled":
            raise RuntimeError(f"{spec.name}: the cancel was answered {answer}")
        times = {"follow_up_sent": sent, "follow_up_first": first, "cancel_sent": cancel_sent}
        times["cancel_answered"] = answered
    finally:
        started += procs.descendants(client.pid)
        client.close()
        _kill_leftovers(started)
    trial = {"follow_up": first - sent, "cancel": answered - cancel_sent, "left": float(left)}
    return trial | (own_shares(trace, times) if trace is not None else {})


def lsp_trial(
    spec: AcpAgentSpec, env: dict[str, str], cwd: Path, tag: str, pause: float, trace: Path | None = None
) -> Trial:
    """The same through the LSP front: `pi/run`s of one conversation, then `pi/cancel`."""
    client = LspClient(
        [PYTHON, "-m", "bridge", "--agent", spec.name], env=trace_env(env, trace), cwd=str(ROOT)
    )
    started: list[Any] = []
    params = {"agent": spec.name, "model": SCENARIO, "provider": spec.provider, "cwd": str(cwd)}
    try:
        client.initialize({"warmPool": False}, TIMEOUT)

        def run(text: str, run_id: str, session: str | None) -> tuple[int, float, int]:
            start = len(client.messages)
            extra = {"sessionId": session} if session else {}
            msg_id, sent = client.request("pi/run", {**params, "prompt": text, "runId": run_id, **extra})
            return msg_id, sent, start

        def of(run_id: str, kind: str) -> Callable[[dict[str, Any]], bool]:
            return lambda m: m["params"]["runId"] == run_id and m["params"]["type"] == kind

        first_id, _, _ = run("echo first", f"{tag}-1", None)
        _, answer = client.wait_response(first_id, TIMEOUT)
        session = answer["result"]["sessionId"]
        time.sleep(pause)
        msg_id, sent, start = run("echo follow-up", f"{tag}-2", session)
        _, first, _ = client.wait_message(of(f"{tag}-2", "assistant"), start, TIMEOUT)
        client.wait_response(msg_id, TIMEOUT)
        msg_id, _, start = run(SLOW_COMMAND, f"{tag}-3", session)
        client.wait_message(of(f"{tag}-3", "tool.call"), start, TIMEOUT)
        tree = _command_processes(client.pid)
        started = procs.descendants(client.pid)
        _, cancel_sent = client.request("pi/cancel", {"runId": f"{tag}-3"})
        answered, answer = client.wait_response(msg_id, TIMEOUT)
        left = len(procs.still_alive(tree))
        status = (answer.get("error") or {}).get("data", {}).get("status")
        if status != "cancelled":
            raise RuntimeError(f"{spec.name}: the LSP cancel was answered {answer}")
        times = {"follow_up_sent": sent, "follow_up_first": first, "cancel_sent": cancel_sent}
        times["cancel_answered"] = answered
    finally:
        started += procs.descendants(client.pid)
        client.close()
        _kill_leftovers(started)
    trial = {"follow_up": first - sent, "cancel": answered - cancel_sent, "left": float(left)}
    return trial | (own_shares(trace, times) if trace is not None else {})


def run(
    trials: int, names: list[str] | None, *, lsp: bool, claude: bool, pause: float = 2.0
) -> tuple[report.Results, Any]:
    """Every installed agent's trials, each way in turn (the order flips every trial); then
    Claude Code's follow-up live against per prompt (bench/suites/per_agent.py)."""
    path = agent_path()
    specs = [s for s in installed(path) if names is None or s.name in names]
    if absent():
        print(f"not installed, skipped: {', '.join(absent())}", file=sys.stderr)
    results: report.Results = {s.name: {"direct": [], "acp": [], "lsp": []} for s in specs}
    follow: Any = None
    with scripted_model() as model:
        for trial in range(trials):
            for spec in specs:
                ways = ["direct", "acp", *(["lsp"] if lsp else [])]
                for way in ways if trial % 2 == 0 else ways[::-1]:
                    with tempfile.TemporaryDirectory(prefix="acp-agents-") as tmp:
                        work = Path(tmp) / "work"
                        work.mkdir()
                        env = agent_env(spec, model, Path(tmp))
                        trace = Path(tmp) / "trace.json" if way != "direct" else None
                        if way == "lsp":
                            got = lsp_trial(spec, env, work, f"{spec.name}-{trial}", pause, trace)
                        else:
                            # no spare, as the LSP front's trials have none (warmPool: false)
                            bridge = [PYTHON, "-m", "bridge", "acp", "--no-warm-pool", "--agent", spec.name]
                            argv = list(spec.command) if way == "direct" else bridge
                            own = {**env, **spec.env} if way == "direct" else trace_env(env, trace)
                            got = acp_trial(argv, spec, own, work, pause, trace)
                    results[spec.name][way].append(got)
                    print(f"trial {trial + 1} {spec.name} {way}: {_fmt(got)}", file=sys.stderr)
        if claude and (names is None or "claude" in names) and per_agent.CLAUDE_BIN.exists():
            claude_dir = model.workdir.parent / "claude-config"
            claude_dir.mkdir(exist_ok=True)
            env = {**base_env(), **per_agent.agent_env(model, claude_dir)}
            follow = per_agent.follow_ups(model, env, trials)
    return results, follow


def _fmt(trial: Trial) -> str:
    follow, cancel = trial["follow_up"] * 1000, trial["cancel"] * 1000
    own = "".join(
        f", {what} {trial[key] * 1000:.2f} ms"
        for key, what in (("own_follow_up", "own follow-up"), ("own_cancel", "own cancel"))
        if key in trial
    )
    return f"follow-up {follow:.1f} ms, cancel {cancel:.1f} ms, left {trial['left']:.0f}{own}"


def main(argv: list[str] | None = None) -> int:
    """Run, print the section; with --write, put it in docs/benchmarks.md in place of its own."""
    args_in = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench acp_agents", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument(
        "--pause", type=float, default=2.0, help="seconds between the first prompt's answer and the follow-up"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 trial of pi-acp, direct and `pi-bridge acp` only"
    )
    parser.add_argument(
        "--agents",
        default=None,
        help="catalog names, and `claude` for Claude Code's live follow-up (default: all installed)",
    )
    parser.add_argument("--no-lsp", action="store_true", help="leave the LSP front out")
    parser.add_argument("--write", action="store_true", help="write the section into docs/benchmarks.md")
    args = parser.parse_args(args_in)
    if args.quick and args.write:
        parser.error("a --quick run does not write the docs")
    names = args.agents.split(",") if args.agents else None
    trials = 1 if args.quick else args.trials
    if args.quick:
        names = names or ["pi-acp"]
    load_before = os.getloadavg()[0]
    pause = min(args.pause, 1.0) if args.quick else args.pause
    results, follow = run(
        trials, names, lsp=not (args.no_lsp or args.quick), claude=not args.quick, pause=pause
    )
    lines = report.section(
        results,
        follow,
        command=" ".join([parser.prog, *args_in]),
        trials=trials,
        load=(load_before, os.getloadavg()[0]),
        cpus=os.cpu_count() or 1,
        pause=pause,
        absent=absent(),
    )
    print("\n".join(lines))
    if args.write:
        docs = ROOT / "docs" / "benchmarks.md"
        docs.write_text(report.replace_section(docs.read_text(encoding="utf-8"), lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
