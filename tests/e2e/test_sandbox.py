"""The sandbox on real pi 1.6.0 with the scripted model: `full` mode, `workspace-write`, every
check driven by the model's own commands (the `shell` scenario runs the prompt as a bash
command; `writepath` calls pi's write tool on the path the prompt names).

The bridge runs with a fake HOME outside /tmp (the sandbox's /tmp is private, so a HOME under it
would be hidden whole and prove nothing), holding a planted SSH key.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from bridge.process import bwrap
from bridge.runs.approvals import REJECT_ONCE
from bridge.runs.rule_store import STATE_DIR_ENV
from tests.conftest import requires_pi
from tests.support.env import WAIT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import (
    bridge_config,
    contents_of,
    initialize,
    make_client,
    messages_of,
    request,
    scripted_run,
)

pytestmark = [
    requires_pi,
    pytest.mark.realpi,
    pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}"),
]

KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- planted-by-the-test"
_HOME_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()
_HOME = Path(tempfile.mkdtemp(prefix="pi-bridge-sandbox-home-", dir=_HOME_BASE))
_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-sandbox-state-"))
SANDBOX = {"mode": "workspace-write", "network": False}


@pytest.fixture(scope="module", autouse=True)
def _home() -> Iterator[Path]:
    (_HOME / ".ssh").mkdir(mode=0o700)
    (_HOME / ".ssh" / "id_rsa").write_text(KEY_TEXT + "\n")
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest_lsp.fixture(
    config=bridge_config({STATE_DIR_ENV: str(_STATE), "HOME": str(_HOME), "PROBE_API_KEY": "sekret"})
)
async def bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    env = {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}
    options = {"env": env, "warmPool": False, "defaultMode": "full", "sandbox": SANDBOX}
    lsp_client.init_result = await initialize(lsp_client, options)  # type: ignore[attr-defined]
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _bash(bridge: LanguageClient, cwd: Path, command: str, **params: Any) -> tuple[Any, list[Any]]:
    return await scripted_run(bridge, cwd, "shell", prompt=command, **params)


def _told(messages: list[Any]) -> str:
    """The model's final answer (it repeats what the command printed)."""
    return str(contents_of(messages, "terminal.completed")[0]["text"])


async def test_initialize_says_a_sandbox_is_available(bridge: LanguageClient) -> None:
    ours = bridge.init_result.capabilities.experimental["piBridge"]  # type: ignore[attr-defined]
    assert ours["sandbox"] == {"available": True, "kind": "bwrap", "reason": None, "fix": None}


async def test_a_write_in_the_workspace_works(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await _bash(bridge, tmp_path, "echo made > inside.txt && cat inside.txt")
    assert result["status"] == "completed", result
    (started,) = contents_of(messages, "session.started")
    assert started["sandbox"] == {"kind": "bwrap", "mode": "workspace-write", "network": False}
    assert (tmp_path / "inside.txt").read_text() == "made\n"
    assert "made" in _told(messages)


async def test_a_write_to_home_fails_and_the_model_is_told(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await _bash(bridge, tmp_path, 'echo x > "$HOME/pwned"')
    assert result["status"] == "completed", result
    (failed,) = contents_of(messages, "tool.failed")
    assert "Read-only file system" in failed["error"], failed
    assert "Read-only file system" in _told(messages)
    assert not (_HOME / "pwned").exists()


async def test_a_planted_ssh_key_is_not_found(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await _bash(bridge, tmp_path, "cat ~/.ssh/id_rsa")
    assert result["status"] == "completed", result
    (failed,) = contents_of(messages, "tool.failed")
    assert "No such file or directory" in failed["error"], failed
    assert "planted-by-the-test" not in str(messages)


async def test_a_key_variable_is_not_passed_on(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await _bash(
        bridge, tmp_path, 'echo "key=[${HOME:+home}${PI_CODING_AGENT_DIR:-nodir}${PROBE_API_KEY:-none}]"'
    )
    assert result["status"] == "completed", result
    # the client's variables (initializationOptions.env) are the agent's, not its commands'
    assert "key=[homenodirnone]" in contents_of(messages, "tool.completed")[0]["output"]


class _Loopback(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        _Loopback.hits.append(self.path)
        body = b"reached-the-loopback-server"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Loopback)
    _Loopback.hits = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("network", [False, True])
async def test_curl_to_a_loopback_server_follows_network(
    bridge: LanguageClient, tmp_path: Path, loopback: str, network: bool
) -> None:
    sandbox = {"mode": "workspace-write", "network": network}
    result, messages = await _bash(bridge, tmp_path, f"curl -sS {loopback}/ping", sandbox=sandbox)
    assert result["status"] == "completed", result
    (started,) = contents_of(messages, "session.started")
    assert started["sandbox"]["network"] is network
    if network:
        assert "reached-the-loopback-server" in contents_of(messages, "tool.completed")[0]["output"]
        assert _Loopback.hits == ["/ping"]
    else:
        (failed,) = contents_of(messages, "tool.failed")
        assert "Couldn't connect" in failed["error"] or "connect" in failed["error"].lower(), failed
        assert _Loopback.hits == []


def _cgroup(pid: int) -> str:
    """The process's cgroup v2 path (the unified hierarchy's line)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next((line for line in lines if line.startswith("0::")), "")


def _find_process(marker: str) -> psutil.Process | None:
    """The process named `marker` (its argv[0]: bwrap's and the shells' argv only contain it)."""
    for process in psutil.process_iter(["cmdline"]):
        if (process.info["cmdline"] or [""])[0] == marker:
            return process
    return None


async def test_a_daemon_in_the_sandbox_is_gone_after_a_cancel_and_in_the_receipt(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    marker = f"sandboxed-daemon-{uuid.uuid4().hex[:8]}"
    command = f"bash -c 'exec -a {marker} sleep 300' & echo started; wait"
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    params = {
        "prompt": command,
        "provider": "fake",
        "model": "shell",
        "cwd": str(tmp_path),
        "runId": run_id,
    }
    task = asyncio.ensure_future(request(bridge, "pi/run", params))
    daemon = None
    try:
        async with asyncio.timeout(WAIT):
            while (daemon := _find_process(marker)) is None:
                await asyncio.sleep(0.05)
        assert os.readlink(f"/proc/{daemon.pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        chain = daemon.parents()
        outer_bwrap = max(i for i, p in enumerate(chain) if p.cmdline()[:1] == [bwrap.probe().path])
        pi = chain[outer_bwrap + 1]  # the bash tool's shell exec'd bwrap: its parent is pi
        # bwrap's namespaces leave the cgroup alone: the daemon is in its pi's, which a stop sweeps
        assert _cgroup(daemon.pid) == _cgroup(pi.pid), (_cgroup(daemon.pid), _cgroup(pi.pid))
        await request(bridge, "pi/cancel", {"runId": run_id})
        with pytest.raises(JsonRpcException, match=r"(?i)cancel"):
            await asyncio.wait_for(task, WAIT)
        (cancelled,) = contents_of(messages_of(bridge).by_run[run_id], "terminal.cancelled")
        assert daemon.pid in cancelled["shutdown"]["pids"], cancelled
        if os.environ.get("PI_BRIDGE_REQUIRE_CGROUP") == "1":
            assert cancelled["shutdown"]["containment"] == "cgroup", cancelled
        assert not psutil.pid_exists(daemon.pid) or daemon.status() == psutil.STATUS_ZOMBIE
    finally:
        if daemon is not None and daemon.is_running():
            daemon.kill()


async def _path_tool_refused(bridge: LanguageClient, cwd: Path, model: str, path: Path) -> dict[str, Any]:
    """pi's file tool (scenario `model`) on `path`: its tool.failed, the run cancelled after it."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    params = {"prompt": str(path), "provider": "fake", "model": model, "cwd": str(cwd)}
    task = asyncio.ensure_future(request(bridge, "pi/run", {**params, "runId": run_id}))
    collected = messages_of(bridge)
    await collected.wait_until(lambda: contents_of(collected.by_run[run_id], "tool.failed"))
    await request(bridge, "pi/cancel", {"runId": run_id})  # `writepath` streams on for a while
    with pytest.raises(JsonRpcException, match=r"(?i)cancel"):
        await asyncio.wait_for(task, WAIT)
    (failed,) = contents_of(collected.by_run[run_id], "tool.failed")
    assert "planted-by-the-test" not in str(collected.by_run[run_id])
    return dict(failed)


async def test_pi_write_tool_outside_the_workspace_is_refused(bridge: LanguageClient, tmp_path: Path) -> None:
    outside = _HOME / "written-by-pi.txt"
    failed = await _path_tool_refused(bridge, tmp_path, "writepath", outside)
    assert "outside the workspace" in failed["error"], failed
    assert not outside.exists()


async def test_pi_read_tool_of_a_hidden_secret_is_refused(bridge: LanguageClient, tmp_path: Path) -> None:
    failed = await _path_tool_refused(bridge, tmp_path, "readpath", _HOME / ".ssh" / "id_rsa")
    assert "is hidden from the agent's tools" in failed["error"], failed


_NO_BWRAP = Path(tempfile.mkdtemp(prefix="pi-bridge-no-bwrap-path-"))


@pytest.fixture(scope="module", autouse=True)
def _path_without_bwrap() -> Iterator[Path]:
    """A PATH of node and bash only: bubblewrap hidden."""
    for name in ("node", "bash"):
        found = shutil.which(name)
        assert found is not None
        (_NO_BWRAP / name).symlink_to(found)
    yield _NO_BWRAP
    shutil.rmtree(_NO_BWRAP, ignore_errors=True)


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE), "PATH": str(_NO_BWRAP)}))
async def bare_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    pi = shutil.which("pi")
    assert pi is not None
    options = {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False, "piCommand": [pi]}
    lsp_client.init_result = await initialize(lsp_client, options)  # type: ignore[attr-defined]
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_without_bubblewrap_a_sandboxed_run_fails_at_once_and_nothing_runs(
    bare_bridge: LanguageClient, tmp_path: Path
) -> None:
    ours = bare_bridge.init_result.capabilities.experimental["piBridge"]  # type: ignore[attr-defined]
    assert ours["sandbox"]["available"] is False and "apt-get install bubblewrap" in ours["sandbox"]["fix"]
    result, messages = await _bash(bare_bridge, tmp_path, ": > ran.txt", sandbox=SANDBOX)
    assert result["status"] == "failed", result
    error = result["error"]
    assert error["kind"] == "sandbox" and not error["retryable"], error
    assert "bubblewrap (bwrap) is not on PATH" in error["message"], error
    assert "apt-get install bubblewrap" in error["message"], error
    assert [m["type"] for m in messages] == ["terminal.failed"], messages
    assert not (tmp_path / "ran.txt").exists()
    result, messages = await _bash(bare_bridge, tmp_path, ": > ran.txt")  # no sandbox asked: it runs
    assert result["status"] == "completed", result
    assert (tmp_path / "ran.txt").exists()


_ASKED: list[dict[str, Any]] = []


def _rejecting_client() -> LanguageClient:
    """A client that can answer approvals, and rejects every one it is asked."""
    client = make_client()

    @client.feature("pi/requestPermission")
    async def on_request(ls: LanguageClient, params: Any) -> Any:
        _ASKED.append(params)
        return {"optionId": REJECT_ONCE}

    return client


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE), "HOME": str(_HOME)}, _rejecting_client))
async def asking_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    options = {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False, "defaultMode": "ask"}
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"piBridge": {"permissions": True}}),
            initialization_options={**options, "sandbox": SANDBOX},
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_in_ask_mode_pi_write_outside_the_workspace_is_asked(
    asking_bridge: LanguageClient, tmp_path: Path
) -> None:
    """In `ask` mode the sandbox does not refuse the write itself: the user decides (rejects here)."""
    _ASKED.clear()
    outside = _HOME / "asked-by-pi.txt"
    failed = await _path_tool_refused(asking_bridge, tmp_path, "writepath", outside)
    assert [(asked["tool"], asked["input"]["path"]) for asked in _ASKED] == [("write", str(outside))]
    assert failed["reason"] == "denied", failed
    assert not outside.exists()
