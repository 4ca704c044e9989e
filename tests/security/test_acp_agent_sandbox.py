"""The whole-agent sandbox of the ACP agents that run their tools themselves (OpenCode and
claude-agent-acp here, from the npm registry), against the scripted model on 127.0.0.1: the
`shell` scenario makes the agent run the prompt as a command with its own bash.

Judged from the disk, from /proc and from every byte the client got and the model was sent. The
agents' HOME is outside /tmp (the sandbox's /tmp is private: a HOME under it would prove nothing)
and holds a planted SSH key, a control file and the bridge's state dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.agent_configs import gemini_env, opencode_env
from tests.e2e.test_acp_agents import ACP_PATH, EXECUTABLES, PROVIDERS, SLOW_COMMAND, requires_acp_agents
from tests.support.acp import acp_bridge, new_session, prompt
from tests.support.env import BRIDGE, WAIT, requires_pi
from tests.support.leaks import assert_no_run_processes, run_processes, wait_for_run_process
from tests.support.lsp import BridgeServerConfig, initialize, make_client, messages_of, request
from tests.support.model_requests import times_seen
from tests.support.streams import assert_stream_invariants

pytestmark = [
    requires_pi,
    requires_acp_agents,
    pytest.mark.realpi,
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}"),
]

KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- planted-for-the-acp-sandbox"
CONTROL_TEXT = "a-plain-file-in-home-7c2e"
SECRET_VALUE = "sekret-in-the-bridge-env-91ad"
_HOME_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()
_HOME = Path(tempfile.mkdtemp(prefix="pi-bridge-acp-sandbox-home-", dir=_HOME_BASE))
_STATE = _HOME / ".local" / "state" / "pi-bridge"
SANDBOX = {"mode": "workspace-write", "network": False}


@pytest.fixture(scope="module", autouse=True)
def _home() -> Iterator[Path]:
    (_HOME / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (_HOME / ".ssh" / "id_rsa").write_text(KEY_TEXT + "\n")
    (_HOME / "notes.txt").write_text(CONTROL_TEXT + "\n")
    _STATE.mkdir(parents=True, exist_ok=True)
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)


def _config(agent: str) -> BridgeServerConfig:
    env = {"PATH": ACP_PATH, "HOME": str(_HOME), STATE_DIR_ENV: str(_STATE), "PROBE_TOKEN": SECRET_VALUE}
    return BridgeServerConfig(
        server_command=[*BRIDGE, "--agent", agent], client_factory=make_client, extra_env=env
    )


def _agent_env(agent: str, model: ScriptedModelServer, pi_agent_dir: Path) -> dict[str, str]:
    """The agent pointed at the scripted model, its state in the test's HOME."""
    origin = model.base_url.removesuffix("/v1")
    if agent == "opencode":
        return {**opencode_env(_HOME, origin, "shell"), "PATH": ACP_PATH}
    if agent == "gemini":
        return {**gemini_env(_HOME, origin, "shell"), "PATH": ACP_PATH}
    if agent == "pi-acp":
        return {"HOME": str(_HOME), "PATH": ACP_PATH, "PI_CODING_AGENT_DIR": str(pi_agent_dir)}
    config = _HOME / ".claude-acp-config"
    config.mkdir(exist_ok=True)
    (config / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "default"}}))
    return {
        "HOME": str(_HOME),
        "PATH": ACP_PATH,
        "ANTHROPIC_BASE_URL": origin,
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(config),
    }


async def _serve(
    client: LanguageClient, agent: str, model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    options = {"env": _agent_env(agent, model, pi_agent_dir), "warmPool": False, "silenceTimeoutMs": 60000}
    await initialize(client, options)
    yield client
    await client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=_config("opencode"))
async def opencode_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge on OpenCode."""
    async for client in _serve(lsp_client, "opencode", scripted_model, pi_agent_dir):
        yield client


@pytest_lsp.fixture(config=_config("claude-acp"))
async def claude_acp_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge on claude-agent-acp."""
    async for client in _serve(lsp_client, "claude-acp", scripted_model, pi_agent_dir):
        yield client


@pytest_lsp.fixture(config=_config("pi-acp"))
async def pi_acp_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge on pi-acp (driving pi)."""
    async for client in _serve(lsp_client, "pi-acp", scripted_model, pi_agent_dir):
        yield client


@pytest_lsp.fixture(config=_config("gemini"))
async def gemini_bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, pi_agent_dir: Path
) -> AsyncIterator[LanguageClient]:
    """A bridge on Gemini CLI."""
    async for client in _serve(lsp_client, "gemini", scripted_model, pi_agent_dir):
        yield client


@pytest.fixture(params=["opencode", "claude-acp", "pi-acp", "gemini"])
def agent(request: pytest.FixtureRequest) -> str:
    """Each ACP agent that runs its own bash."""
    return str(request.param)


@pytest.fixture
def bridge(request: pytest.FixtureRequest, agent: str) -> LanguageClient:
    client: LanguageClient = request.getfixturevalue(f"{agent.replace('-', '_')}_bridge")
    return client


def _params(agent: str, command: str, cwd: Path, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"prompt": command, "agent": agent, "model": "shell", "cwd": str(cwd)}
    if agent in PROVIDERS:
        params["provider"] = PROVIDERS[agent]
    return {"sandbox": SANDBOX, **params, **extra}


async def _run(client: LanguageClient, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with anyio.fail_after(WAIT * 2):
        result = await request(client, "pi/run", params)
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    assert result["status"] == "completed", messages[-1]["content"]
    return result, messages


def _seen(client: LanguageClient, model: ScriptedModelServer) -> str:
    """Every frame the client got and every request the model was sent, as one text."""
    frames = [messages_of(client).by_run, client.log_messages, client.messages]
    return json.dumps([frames, [r["body"] for r in model.requests]], default=str)


def _agent_pids(agent: str) -> list[int]:
    """This test's processes of the agent's executable (found anywhere in their argv: bwrap's
    argv names it too, so only a process whose argv[0] or argv[1] does counts)."""
    found = []
    for proc in run_processes():
        try:
            if any(EXECUTABLES[agent] in part for part in proc.cmdline()[:2]):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _mount_ns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def _confined(pids: list[int]) -> list[int]:
    """Those of `pids` in a mount namespace other than the test's (a sandbox's)."""
    return [pid for pid in pids if _mount_ns(pid) != _mount_ns(os.getpid())]


async def _cancel_mid_command(bridge: LanguageClient, agent: str, cwd: Path, sid: str, pid: int) -> None:
    """A cancel of a sandboxed command: answered, and nothing of it left in /proc."""
    run_id = f"cancel-{os.urandom(3).hex()}"
    params = _params(agent, SLOW_COMMAND, cwd, sessionId=sid, runId=run_id)
    task = asyncio.ensure_future(request(bridge, "pi/run", params))
    await messages_of(bridge).wait_type(run_id, "tool.call")
    sleeper = await wait_for_run_process("sleep 30")
    assert _mount_ns(sleeper.pid) == _mount_ns(pid), "the command runs in the agent's sandbox"
    answer = await request(bridge, "pi/cancel", {"runId": run_id})
    with pytest.raises(Exception) as raised:
        await asyncio.wait_for(task, WAIT)
    assert raised.value.data["status"] == "cancelled"  # type: ignore[attr-defined]
    assert answer["shutdown"]["survivors"] == []
    left = [p for p in run_processes() if "sleep" in " ".join(p.cmdline())]
    assert left == [], "nothing of the command is left in /proc"


async def test_the_whole_agent_runs_confined_and_a_cancel_leaves_nothing(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, agent: str
) -> None:
    """One conversation, one sandboxed agent process: a workspace write lands, a write to $HOME
    fails and leaves no file, the planted key and a secret variable never reach a frame nor the
    model (while a plain file of $HOME does: the command ran), a cancel mid-command leaves
    nothing in /proc; then the same conversation read-only is a new process on the same session."""
    tag = os.urandom(3).hex()
    command = f"echo made-{tag} > inside.txt && cat inside.txt"
    first, messages = await _run(bridge, _params(agent, command, tmp_path))
    assert (tmp_path / "inside.txt").read_text() == f"made-{tag}\n", "a write in the workspace lands"
    (started,) = [m["content"] for m in messages if m["type"] == "session.started"]
    assert started["sandbox"] == {"kind": "bwrap", "mode": "workspace-write", "network": True}, (
        "it says the agent keeps the network it reaches its model through"
    )
    sid = first["sessionId"]
    [pid] = _agent_pids(agent)
    assert _mount_ns(pid) != _mount_ns(os.getpid()), "the agent process itself is in the sandbox"

    await _run(bridge, _params(agent, 'echo x > "$HOME/pwned"; ls "$HOME"', tmp_path, sessionId=sid))
    assert not (_HOME / "pwned").exists(), "a write to $HOME leaves no file"
    assert "Read-only file system" in _seen(bridge, scripted_model)

    probe = "cat ~/notes.txt ~/.ssh/id_rsa; echo key=${PROBE_TOKEN:-none}"
    await _run(bridge, _params(agent, probe, tmp_path, sessionId=sid))
    seen = _seen(bridge, scripted_model)  # Gemini CLI shows no output in its frames: the model sees it
    assert CONTROL_TEXT in seen, "the command ran and read $HOME"
    assert "key=none" in seen, "the secret variable was dropped"
    assert "planted-for-the-acp-sandbox" not in seen and SECRET_VALUE not in seen
    assert _agent_pids(agent) == [pid], "one sandboxed process served the conversation"

    await _cancel_mid_command(bridge, agent, tmp_path, sid, pid)

    read_only = {"mode": "read-only", "network": False}
    command = f"echo ro-{tag} > ro.txt"
    if agent == "gemini":
        # Gemini CLI 0.61.0 answers session/load of the session it stored with "No previous
        # sessions found for this project" (test_acp_agents.py's killed-mid-turn test meets the
        # same): the restarted conversation fails clearly instead of going on without its turns.
        params = _params(agent, command, tmp_path, sessionId=sid, sandbox=read_only)
        try:
            failed: dict[str, Any] = await request(bridge, "pi/run", params)
        except Exception as exc:  # a failed run may answer with an error carrying its result
            failed = exc.data  # type: ignore[attr-defined]
        assert failed["status"] == "failed", failed
        assert "Gemini CLI's `session/load` was refused" in failed["error"]["message"], failed
        assert not (tmp_path / "ro.txt").exists()
        pytest.xfail("Gemini CLI 0.61.0 does not load the session it stored (docs/agents.md)")
    result, _ = await _run(bridge, _params(agent, command, tmp_path, sessionId=sid, sandbox=read_only))
    assert result["sessionId"] == sid, "the conversation goes on under its new sandbox"
    assert not (tmp_path / "ro.txt").exists(), "read-only: the workspace write failed"
    [new_pid] = _agent_pids(agent)
    assert new_pid != pid, "a sandbox change starts the agent anew"
    last = [r for r in scripted_model.requests if r["model"] == "shell"][-1]["body"]
    assert times_seen(last, tag, "made", "ro") == [1, 1], "it loaded the session: the model saw each once"


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u"}
    env["GIT_COMMITTER_EMAIL"] = "u@x"
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


async def test_a_files_rewind_restores_what_the_sandboxed_agent_s_own_tool_changed(
    opencode_bridge: LanguageClient, tmp_path: Path
) -> None:
    """OpenCode's bash (not the bridge) changes a file in the turn: the turn's checkpoint holds
    it, and a files rewind puts its bytes back exactly, leaving the ignored file it made alone."""
    client = opencode_bridge
    work = tmp_path / "work"
    work.mkdir()
    original = b"line one\r\nline two\n\x00binary tail"
    (work / "notes.txt").write_bytes(original)
    (work / ".gitignore").write_text("build/\n")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "the user's commit")
    command = "printf changed > notes.txt && mkdir -p build && echo built > build/out.bin"
    result, _ = await _run(client, _params("opencode", command, work))
    assert (work / "notes.txt").read_bytes() == b"changed", "the agent's own tool changed it"
    session = result["sessionId"]
    with anyio.fail_after(30):
        while True:
            listed = await request(client, "pi/checkpoints", {"sessionId": session})
            assert listed["available"] is True, listed
            if listed["checkpoints"]:
                break
            await anyio.sleep(0.05)
    (checkpoint,) = listed["checkpoints"]
    assert checkpoint["files"] == ["notes.txt"], checkpoint
    rewind = {"sessionId": session, "checkpointId": checkpoint["checkpointId"], "restore": "files"}
    done = await request(client, "pi/rewind", rewind)
    assert done["restored"] == ["notes.txt"], done
    assert (work / "notes.txt").read_bytes() == original, "the exact bytes are back"
    assert (work / "build" / "out.bin").read_text() == "built\n", "the ignored file is left alone"


async def test_the_acp_front_s_sandbox_confines_opencode_whole(
    scripted_model: ScriptedModelServer, pi_agent_dir: Path, tmp_path: Path
) -> None:
    """`pi-bridge acp --agent opencode` with `_meta.piBridge.sandbox`: the process session/new
    starts is confined already (its first prompt needs no other), and the same confinement holds
    for a client that speaks ACP, judged from the disk and from every update the client got."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**_agent_env("opencode", scripted_model, pi_agent_dir), "PROBE_TOKEN": SECRET_VALUE}
    meta = {"piBridge": {"sandbox": SANDBOX}}
    command = 'echo made > front.txt; echo x > "$HOME/pwned-front"; cat ~/notes.txt ~/.ssh/id_rsa'
    async with acp_bridge(pi_agent_dir, work, args=("--agent", "opencode"), extra_env=env, meta=meta) as (
        conn,
        recorder,
        _,
    ):
        session_id = await new_session(conn, work)
        [opened] = _confined(_agent_pids("opencode"))  # the process session/new started
        answer = await prompt(conn, session_id, command, timeout=WAIT * 2)
        assert answer.stop_reason == "end_turn"
        assert _confined(_agent_pids("opencode")) == [opened], "the first prompt needed no new process"
        assert (work / "front.txt").read_text() == "made\n", "a write in the workspace lands"
        assert not (_HOME / "pwned-front").exists(), "a write to $HOME leaves no file"
        updates = json.dumps([u.model_dump(mode="json") for _, u in recorder.updates])
        bodies = json.dumps([r["body"] for r in scripted_model.requests])
        assert CONTROL_TEXT in bodies, "the command ran and read $HOME"
        assert "planted-for-the-acp-sandbox" not in updates + bodies
    await assert_no_run_processes()
