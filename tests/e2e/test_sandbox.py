"""The sandbox on real pi 1.6.0 with the scripted model: `full` mode, `workspace-write`, every
check driven by the model's own commands (the `shell` scenario runs the prompt as a bash
command; `writepath` calls pi's write tool on the path the prompt names).

The bridge runs with a fake HOME outside /tmp (the sandbox's /tmp is private, so a HOME under it
would be hidden whole and prove nothing), holding a planted SSH key, and its state dir inside that
HOME (where it is by default), so hiding it is the sandbox's doing, not /tmp's. CI runs this as
root: each escape below worked as root before the sandbox dropped every capability.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
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

from bridge.policy.approvals import REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
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
_STATE = _HOME / ".local" / "state" / "pi-bridge"
_STATE.mkdir(parents=True)
SANDBOX = {"mode": "workspace-write", "network": False}
#: A variable the client gives in initializationOptions.env: its name says no secret, its value is one.
CLIENT_VAR, CLIENT_VALUE = "PROBE_SETTING", "client-given-value-4f1c"
MCP_SECRET = "mcp-password-in-the-state-dir-77a1"


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
    env = {"PI_CODING_AGENT_DIR": str(pi_agent_dir), CLIENT_VAR: CLIENT_VALUE}
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


async def test_a_key_variable_is_not_passed_on(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """Neither a secret-named variable nor any the client gave (PI_CODING_AGENT_DIR, which used to
    be passed on, is one): the client's values are the user's."""
    command = (
        f'echo "key=[${{PI_CODING_AGENT_DIR:+dir}}${{PROBE_API_KEY:-none}}${{{CLIENT_VAR}:-}}]"; echo "$HOME"'
    )
    result, messages = await _bash(bridge, tmp_path, command)
    assert result["status"] == "completed", result
    output = contents_of(messages, "tool.completed")[0]["output"]
    assert "key=[none]" in output and str(_HOME) in output, output
    assert CLIENT_VALUE not in _seen(bridge, scripted_model) and "sekret" not in _seen(bridge, scripted_model)


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


# -- issue 34: the sandbox in depth ----------------------------------------------------------------


def _seen(client: LanguageClient, model: ScriptedModelServer) -> str:
    """Every frame the client got (each run's messages, log and shown messages) and every request
    the model received, as one text to search."""
    frames = [messages_of(client).by_run, client.log_messages, client.messages]
    bodies = [request["body"] for request in model.requests]
    return json.dumps([frames, bodies], default=str)


def _output(messages: list[Any]) -> str:
    """What the command printed, whether it succeeded or failed."""
    done = contents_of(messages, "tool.completed") + contents_of(messages, "tool.failed")
    return " ".join(str(item.get("output", "")) + str(item.get("error", "")) for item in done)


async def test_the_command_has_no_capability_even_as_root(bridge: LanguageClient, tmp_path: Path) -> None:
    result, messages = await _bash(bridge, tmp_path, "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status")
    assert result["status"] == "completed", result
    output = _output(messages)
    for name in ("CapEff", "CapPrm", "CapBnd"):
        assert f"{name}:\t0000000000000000" in output, output


async def test_umount_of_the_masked_ssh_dir_fails_and_the_key_stays_unread(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    command = 'umount "$HOME/.ssh"; umount -l "$HOME/.ssh"; cat "$HOME/.ssh/id_rsa"; echo "rc=$?"'
    result, messages = await _bash(bridge, tmp_path, command)
    assert result["status"] == "completed", result
    assert "rc=1" in _output(messages), _output(messages)
    assert "planted-by-the-test" not in _seen(bridge, scripted_model)


async def test_remount_of_root_fails_and_home_stays_unwritten(bridge: LanguageClient, tmp_path: Path) -> None:
    command = 'mount -o remount,bind,rw /; mount -o remount,rw "$HOME"; echo x > "$HOME/pwned-by-remount"'
    result, messages = await _bash(bridge, tmp_path, command)
    assert result["status"] == "completed", result
    assert "Read-only file system" in _output(messages), _output(messages)
    assert not (_HOME / "pwned-by-remount").exists()


@pytest.fixture
def home_socket() -> Iterator[socket.socket]:
    """A unix-socket server listening in the fake HOME, as an agent or a daemon's would."""
    path = _HOME / f"agent-{uuid.uuid4().hex[:6]}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()
    path.unlink(missing_ok=True)


def _connected(server: socket.socket) -> bool:
    """Whether any client connected: a finished connect() waits in the backlog, accepted or not."""
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


async def test_a_unix_socket_in_home_receives_nothing_from_the_sandbox(
    bridge: LanguageClient, tmp_path: Path, home_socket: socket.socket
) -> None:
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    script = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({home_socket.getsockname()!r}); "
    script += "s.sendall(b'from-sandbox'); print('sent')"
    command = f"{python} -c {json.dumps(script)}"
    result, messages = await _bash(bridge, tmp_path, command)
    assert result["status"] == "completed", result
    assert "Operation not permitted" in _output(messages), _output(messages)
    assert not _connected(home_socket)
    # the same command without the sandbox reaches it: the server and the command are sound
    result, messages = await _bash(bridge, tmp_path, command, sandbox={"mode": "off"})
    assert "sent" in _output(messages), _output(messages)
    assert _connected(home_socket)


async def test_the_state_dir_and_the_mcp_config_cannot_be_read(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    server = {
        "name": "fixture",
        "command": sys.executable,
        "args": [str(Path(__file__).parents[1] / "fixtures" / "mcp_server.py")],
        "env": [{"name": "MCP_FIXTURE_SECRET", "value": MCP_SECRET}],
    }
    command = (
        f'echo "var=[$PI_BRIDGE_MCP_CONFIG][$PI_BRIDGE_GATE_DIR][$PI_BRIDGE_SANDBOX_DIR]"; '
        f'cat "$PI_BRIDGE_MCP_CONFIG"; grep -rl . {_STATE} ; echo "files=[$(find {_STATE} -type f | wc -l)]"; '
        f"echo approve > {_STATE}/planted-by-the-sandbox"
    )
    result, messages = await _bash(bridge, tmp_path, command, mcpServers=[server])
    assert result["status"] == "completed", result
    output = _output(messages)
    assert "var=[][][]" in output and "files=[0]" in output, output
    # the config is there on the disk, with its secret, while the sandbox saw none of it
    holding = [
        path for path in _STATE.rglob("*") if path.is_file() and MCP_SECRET in path.read_text("latin-1")
    ]
    assert holding, sorted(_STATE.rglob("*"))
    assert MCP_SECRET not in _seen(bridge, scripted_model)
    assert not (_STATE / "planted-by-the-sandbox").exists()


async def test_with_the_workspace_at_home_the_key_and_the_state_stay_hidden(
    bridge: LanguageClient, scripted_model: ScriptedModelServer
) -> None:
    command = f"cat ~/.ssh/id_rsa; ls -A ~/.ssh | wc -l; find {_STATE} -type f | wc -l; echo x > ~/.bashrc; "
    command += "echo evil > ~/.pi/agent/extensions/evil.ts"  # pi's own config dir: its user-level extensions
    (_HOME / ".bashrc").write_text("# the user's\n")
    (_HOME / ".pi" / "agent" / "extensions").mkdir(parents=True)
    try:
        result, messages = await _bash(bridge, _HOME, command)
        assert result["status"] == "completed", result
        output = _output(messages)
        assert "No such file or directory" in output and "Read-only file system" in output, output
        assert (_HOME / ".bashrc").read_text() == "# the user's\n"
        assert not (_HOME / ".pi" / "agent" / "extensions" / "evil.ts").exists()
        assert "planted-by-the-test" not in _seen(bridge, scripted_model)
    finally:
        (_HOME / ".bashrc").unlink()
        shutil.rmtree(_HOME / ".pi")


def _git_repo(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)


async def test_agent_config_and_hooks_cannot_be_planted(bridge: LanguageClient, tmp_path: Path) -> None:
    _git_repo(tmp_path)
    (tmp_path / ".pi" / "extensions").mkdir(parents=True)
    (tmp_path / ".mcp.json").write_text("{}")
    config = (tmp_path / ".git" / "config").read_bytes()
    command = (
        "echo evil > .pi/extensions/evil.ts; echo evil > .git/hooks/pre-commit; "
        "echo evil > .git/commondir; echo '{\"evil\": 1}' > .mcp.json; echo '[core]' >> .git/config; "
        "mv .git .git-moved; mv .pi .pi-moved; echo fine > allowed.txt"
    )
    result, messages = await _bash(bridge, tmp_path, command)
    assert result["status"] == "completed", result
    assert not (tmp_path / ".pi" / "extensions" / "evil.ts").exists()
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists()
    assert not (tmp_path / ".git" / "commondir").exists()
    assert (tmp_path / ".mcp.json").read_text() == "{}"
    assert (tmp_path / ".git" / "config").read_bytes() == config
    assert not (tmp_path / ".git-moved").exists() and not (tmp_path / ".pi-moved").exists()
    assert (tmp_path / "allowed.txt").read_text() == "fine\n"  # the rest of the workspace is writable


async def test_the_sandbox_leaves_no_file_in_the_workspace(bridge: LanguageClient, tmp_path: Path) -> None:
    """Config that does not exist yet gets no mount point: it would be a file left behind."""
    result, _messages = await _bash(bridge, tmp_path, "echo made > only.txt")
    assert result["status"] == "completed", result
    assert sorted(path.name for path in tmp_path.iterdir()) == ["only.txt"]
