"""Benchmark 6: pi-bridge and pi-acp 0.0.34 on the same pi, scripted model and prompts, one invocation."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from bench import procs
from bench.clients.acp import AcpClient
from bench.clients.lsp import LspClient
from bench.common import PI_ACP, base_env
from bench.model import DEAD_REGISTRY, PROVIDER, ModelEnv
from bench.suites.realpi import run_params, start_bridge, timed_run

ACP_INIT = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
}
# The start of the scripted model's replies (`text` and `long-N`): the first chunk holding model text.
ANSWER_STARTS = ("Hello", "w0")
# A version banner ("pi v1.6.0") sent as an answer chunk.
BANNER = re.compile(r"\s*pi v\d")


@dataclass
class Sequence:
    """One adapter's figures for one pass of the sequence (seconds, kB)."""

    spawn_to_ready: float = 0.0
    spawn_to_first_chunk: float = 0.0
    first_prompt_first_chunk: float = 0.0
    first_prompt_total: float = 0.0
    second_prompt_first_chunk: float = 0.0
    second_prompt_total: float = 0.0
    cancel_mid_tool: float = 0.0
    left_after_cancel: int = 0
    long_first: float = 0.0
    long_total: float = 0.0
    long_chars: int = 0
    cpu: float = 0.0
    cpu_after_ready: float = 0.0
    peak_rss_kb: int = 0
    banner_first: bool = False
    session_new: float = 0.0
    banner_chunks: int = 0
    registry_calls: int = 0
    notes: list[str] = field(default_factory=list)


def bridge_sequence(model: ModelEnv, *, long_scenario: str = "long-20000", pause: float = 2.0) -> Sequence:
    """The sequence on pi-bridge as an editor opened on the workspace runs it (default
    initializationOptions, rootUri = the workspace): one conversation, its prompts carrying its
    sessionId, as pi-acp's prompts carry their ACP session. Its first prompt comes once the
    spare pi is up, as pi-acp's comes once `session/new` has its pi."""
    seq = Sequence()
    client = start_bridge(model, workspace=True)
    try:
        seq.spawn_to_ready = client.responses[1][0] - client.spawned_at
        cpu_ready = procs.cpu_seconds(client.pid)
        _wait_for_spare(client)
        msg_start = len(client.messages)
        first = timed_run(client, model, "text", "sbs-1")
        session = first.session_id
        seq.first_prompt_first_chunk, seq.first_prompt_total = first.first, first.total
        seq.spawn_to_first_chunk = client.messages[msg_start][0] - client.spawned_at
        # the first kept message of sbs-1 that is assistant text
        for arrived, message in client.messages[msg_start:]:
            if message["params"]["runId"] == "sbs-1" and message["params"]["type"] == "assistant":
                seq.spawn_to_first_chunk = arrived - client.spawned_at
                break
        time.sleep(pause)
        second = timed_run(client, model, "text", "sbs-2", session=session)
        seq.second_prompt_first_chunk, seq.second_prompt_total = second.first, second.total
        start = len(client.messages)
        before_tool = {p.pid for p in procs.descendants(client.pid)}
        run_msg, _ = client.request("pi/run", run_params(model, "toolslow", "sbs-tool", session))
        client.wait_message(
            lambda m: m["params"]["runId"] == "sbs-tool" and m["params"]["type"] == "tool.call", start, 60
        )
        procs.wait_for_process(client.pid, "sleep 30")
        runs_msg, _ = client.request("pi/runs", None)
        runs = client.wait_response(runs_msg, 30)[1].get("result") or {}
        # The tool's processes: not the agents alive on purpose, nor a spare still starting.
        tree = [
            p
            for p in procs.descendants(client.pid)
            if p.pid not in kept_pids(runs) | before_tool and "--mode rpc" not in procs.cmdline(p)
        ]
        _, sent = client.request("pi/cancel", {"runId": "sbs-tool"})
        answered, _ = client.wait_response(run_msg, 30)
        seq.cancel_mid_tool = answered - sent
        # A spare still starting at the first look is listed by now.
        runs_msg, _ = client.request("pi/runs", None)
        kept = kept_pids(client.wait_response(runs_msg, 30)[1].get("result") or {})
        seq.left_after_cancel = len({p.pid for p in procs.still_alive(tree)} - kept)
        long = timed_run(client, model, long_scenario, "sbs-long", timeout=300, session=session)
        seq.long_first, seq.long_total, seq.long_chars = long.first, long.total, len(long.text)
        seq.cpu = procs.cpu_seconds(client.pid)
        seq.cpu_after_ready = seq.cpu - cpu_ready
        seq.peak_rss_kb = procs.status_kb(client.pid, "VmHWM")
    finally:
        client.close()
    return seq


def _wait_for_spare(client: LspClient, timeout: float = 30.0) -> None:
    """Until pi/runs lists the spare pi (pre-spawned after `initialized`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id, _ = client.request("pi/runs", None)
        if (client.wait_response(msg_id, 30)[1].get("result") or {}).get("warmPids"):
            return
        time.sleep(0.01)
    raise RuntimeError(f"no spare pi within {timeout:g} s")


def kept_pids(runs: dict[str, Any]) -> set[int]:
    """Agents alive on purpose (pi/runs): the pre-spawned ones, and each conversation's pi,
    which the rpc engine keeps after a cancel (its receipt says agentKept)."""
    return set(runs.get("warmPids", [])) | {entry["pid"] for entry in runs.get("live", [])}


def _is_answer_chunk(update: dict[str, Any]) -> bool:
    if update.get("sessionUpdate") != "agent_message_chunk":
        return False
    text = (update.get("content") or {}).get("text", "")
    return isinstance(text, str) and text.startswith(ANSWER_STARTS)


def acp_prompt(
    client: AcpClient, session: str, text: str, timeout: float = 120
) -> tuple[float, float, float, bool]:
    """(sent time, first answer chunk, answered, whether a non-answer chunk came first)."""
    start = len(client.updates)
    msg_id, sent = client.request(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    )
    _, first, _ = client.wait_update(_is_answer_chunk, start, timeout)
    answered, answer = client.wait_response(msg_id, timeout)
    if (answer.get("result") or {}).get("stopReason") != "end_turn":
        raise RuntimeError(f"pi-acp prompt did not end its turn: {answer}")
    chunks = [u for _, u in client.updates if u.get("sessionUpdate") == "agent_message_chunk"]
    banner = bool(chunks) and not _is_answer_chunk(chunks[0])
    return sent, first, answered, banner


def set_acp_model(client: AcpClient, session: str, scenario: str) -> None:
    _, _, answer = client.call(
        "session/set_config_option",
        {"sessionId": session, "configId": "model", "value": f"{PROVIDER}/{scenario}"},
    )
    if "error" in answer:
        raise RuntimeError(f"pi-acp could not switch to {scenario}: {answer['error']}")


def _acp_cancel_mid_tool(client: AcpClient, session: str, seq: Sequence, tree: list[Any]) -> None:
    """Model `toolslow`: cancel once `sleep 30` runs; the tool's processes go into ``tree`` (for the
    caller's clean-up) before the cancel is sent."""
    set_acp_model(client, session, "toolslow")
    start = len(client.updates)
    msg_id, _ = client.request(
        "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "Say hello"}]}
    )
    client.wait_update(lambda u: u.get("sessionUpdate") == "tool_call", start, 60)
    procs.wait_for_process(client.pid, "sleep 30")
    pi_rpc = {p.pid for p in procs.descendants(client.pid) if "sleep" not in procs.cmdline(p)}
    tree.extend(p for p in procs.descendants(client.pid) if p.pid not in pi_rpc)
    sent = client.notify("session/cancel", {"sessionId": session})
    answered, answer = client.wait_response(msg_id, 30)
    seq.cancel_mid_tool = answered - sent
    seq.left_after_cancel = len({p.pid for p in procs.still_alive(tree)})
    if (answer.get("result") or {}).get("stopReason") != "cancelled":
        seq.notes.append(f"cancel answered {answer}")


def _acp_long_run(client: AcpClient, session: str, seq: Sequence, long_scenario: str) -> None:
    """Model ``long_scenario``: first chunk and answer times, and the characters of its answer."""
    set_acp_model(client, session, long_scenario)
    start = len(client.updates)
    sent, first, answered, _ = acp_prompt(client, session, "Say hello", timeout=300)
    seq.long_first, seq.long_total = first - sent, answered - sent
    texts = [
        (u.get("content") or {}).get("text", "")
        for _, u in client.updates[start:]
        if u.get("sessionUpdate") == "agent_message_chunk"
    ]
    seq.long_chars = sum(len(t) for t in texts if t.startswith("w"))


def acp_sequence(
    model: ModelEnv,
    *,
    long_scenario: str = "long-20000",
    pause: float = 2.0,
    argv: list[str] | None = None,
    registry: str = DEAD_REGISTRY,
) -> Sequence:
    """The sequence on an ACP agent (default pi-acp; `argv` e.g. `pi-bridge acp`), each through
    its own long-lived `pi --mode rpc`. `registry`: the npm registry URL the agent is given."""
    seq = Sequence()
    env = {**base_env(), **model.pi_env(), "npm_config_registry": registry}
    client = AcpClient(argv or ["node", str(PI_ACP)], env=env, cwd=str(model.workdir))
    tree: list[Any] = []
    try:
        _, ready, _ = client.call("initialize", ACP_INIT)
        new_sent, new_answered, new = client.call(
            "session/new", {"cwd": str(model.workdir), "mcpServers": []}
        )
        seq.session_new = new_answered - new_sent
        session = new["result"]["sessionId"]
        seq.spawn_to_ready = ready - client.spawned_at
        cpu_ready = procs.cpu_seconds(client.pid)
        sent, first, answered, banner = acp_prompt(client, session, "Say hello")
        seq.spawn_to_first_chunk = first - client.spawned_at
        seq.first_prompt_first_chunk, seq.first_prompt_total = first - sent, answered - sent
        seq.banner_first = banner
        time.sleep(pause)
        sent, first, answered, _ = acp_prompt(client, session, "Say hello")
        seq.second_prompt_first_chunk, seq.second_prompt_total = first - sent, answered - sent
        _acp_cancel_mid_tool(client, session, seq, tree)
        _acp_long_run(client, session, seq, long_scenario)
        seq.cpu = procs.cpu_seconds(client.pid)
        seq.cpu_after_ready = seq.cpu - cpu_ready
        seq.peak_rss_kb = procs.status_kb(client.pid, "VmHWM")
        seq.banner_chunks = sum(
            1
            for _, u in client.updates
            if u.get("sessionUpdate") == "agent_message_chunk"
            and BANNER.match(str((u.get("content") or {}).get("text", "")))
        )
    finally:
        everything = procs.descendants(client.pid)
        client.close()
        time.sleep(0.2)
        for proc in procs.still_alive(everything + tree):
            seq.notes.append(f"killed leftover {procs.cmdline(proc)[:40]!r} after pi-acp closed")
            try:
                proc.kill()
            except Exception:
                pass
    return seq
