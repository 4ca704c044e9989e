"""The sandbox on the real Claude Code with the scripted model: every tool call is the model's
own (the `shell` scenario runs the prompt as a Bash command; `script` makes the calls the
prompt lists, paths and all), in a `full` conversation, so nobody is asked and only the sandbox
stands between the model and the machine.

The bridge runs with a fake HOME outside /tmp (the sandbox's /tmp is private, so a HOME under it
would be hidden whole and prove nothing), holding a planted SSH key. Each verdict comes from the
disk, from every frame the client got and from every request the scripted model received.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.approvals import ALLOW_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
from tests.support.env import BRIDGE, CLAUDE_BIN, ROOT, requires_claude
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, contents_of, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [
    requires_claude,
    pytest.mark.realpi,
    pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}"),
]

KEY_MARK = "planted-by-the-claude-test"
_HOME_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()
_HOME = Path(tempfile.mkdtemp(prefix="pi-bridge-claude-sandbox-home-", dir=_HOME_BASE))
_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-claude-sandbox-state-"))
SANDBOX = {"mode": "workspace-write", "network": False}

#: Every pi/requestPermission the client got; it allows each once.
ASKED: list[dict[str, Any]] = []


def _client() -> LanguageClient:
    client = make_client()

    @client.feature("pi/requestPermission")
    async def on_request(ls: LanguageClient, params: Any) -> Any:
        ASKED.append(params)
        return {"optionId": ALLOW_ONCE}

    return client


CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "claude"],
    client_factory=_client,
    extra_env={
        "PATH": os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")]),
        STATE_DIR_ENV: str(_STATE),
        "HOME": str(_HOME),
    },
)


@pytest.fixture(scope="module", autouse=True)
def _home() -> Iterator[Path]:
    (_HOME / ".ssh").mkdir(mode=0o700)
    (_HOME / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY----- {KEY_MARK}\n")
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    """A bridge whose agent is Claude Code, its conversations `full` and sandboxed by default."""
    options = {
        "env": {
            "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": str(tmp_path_factory.mktemp("claude-config")),
        },
        "defaultMode": "full",
        "sandbox": SANDBOX,
        "silenceTimeoutMs": 30000,
    }
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"piBridge": {"permissions": True}}),
            initialization_options=options,
            root_uri=ROOT.as_uri(),
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _run(client: LanguageClient, cwd: Path, model: str, prompt: str, **params: Any) -> Any:
    result = await request(client, "pi/run", {"prompt": prompt, "model": model, "cwd": str(cwd), **params})
    assert result["status"] == "completed", result
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    (started,) = contents_of(messages, "session.started") or contents_of(messages, "session.resumed")
    sandbox = params.get("sandbox", SANDBOX)
    off = {"kind": "none", "mode": "off", "network": True}
    assert started["sandbox"] == (off if sandbox["mode"] == "off" else {"kind": "bwrap", **sandbox})
    return result, messages


def _tool_results(model: ScriptedModelServer, mark: int) -> list[str]:
    """What each tool call said, as the model was told it (the requests' tool_result blocks, in
    order; a later request repeats the earlier ones)."""
    found: dict[str, str] = {}
    for seen in model.requests[mark:]:
        for message in seen["body"].get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.setdefault(str(block.get("tool_use_id")), json.dumps(block.get("content")))
    return list(found.values())


def _assert_key_never_left(client: LanguageClient, model: ScriptedModelServer, mark: int) -> None:
    """The planted key is in no frame the client got and in no request the model received (the
    prompt names the key's path, never its text)."""
    assert KEY_MARK not in json.dumps(dict(messages_of(client).by_run))
    assert len(model.requests) > mark
    assert KEY_MARK not in json.dumps([seen["body"] for seen in model.requests])


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


async def test_claude_codes_bash_writes_the_workspace_only_has_no_network_and_no_capability(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path, loopback: str
) -> None:
    command = (
        'echo made > inside.txt; echo x > "$HOME/pwned"; echo "home-write=$?"; '
        f'curl -sS --max-time 5 {loopback}/ping; echo "curl=$?"; grep CapEff /proc/self/status'
    )
    mark = len(scripted_model.requests)
    await _run(bridge, tmp_path, "shell", command)
    (said,) = _tool_results(scripted_model, mark)
    assert (tmp_path / "inside.txt").read_text() == "made\n", "the command ran, in the workspace"
    assert not (_HOME / "pwned").exists()
    assert "Read-only file system" in said and "home-write=1" in said, said
    assert _Loopback.hits == [] and "reached-the-loopback-server" not in said
    assert "curl=7" in said, said  # could not connect
    assert "CapEff:\\t0000000000000000" in said, said


async def test_a_cat_claude_code_judges_read_only_is_confined_too(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    mark = len(scripted_model.requests)
    await _run(bridge, tmp_path, "shell", "cat ~/.ssh/id_rsa")
    (said,) = _tool_results(scripted_model, mark)
    assert "No such file or directory" in said, said
    _assert_key_never_left(bridge, scripted_model, mark)


async def test_claude_codes_write_and_read_outside_the_workspace_are_refused(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    calls = [
        ["Write", {"file_path": "~/pwned.txt", "content": "pwned"}],
        ["Write", {"file_path": str(_HOME / "pwned2.txt"), "content": "pwned"}],
        ["Read", {"file_path": "~/.ssh/id_rsa"}],
        ["Read", {"file_path": str(_HOME / ".ssh" / "id_rsa")}],
        ["Write", {"file_path": str(tmp_path / "link"), "content": "through a dangling link"}],
        ["Write", {"file_path": str(tmp_path / "ok.txt"), "content": "fine"}],
    ]
    (tmp_path / "link").symlink_to(_HOME / ".profile")  # dangling: ~/.profile does not exist
    mark = len(scripted_model.requests)
    await _run(bridge, tmp_path, "script", json.dumps(calls))
    said = _tool_results(scripted_model, mark)
    assert len(said) == len(calls), said
    assert all("sandbox:" in answer for answer in said[:5]), said
    assert (tmp_path / "ok.txt").read_text() == "fine", "a write inside the workspace is allowed"
    assert not (_HOME / "pwned.txt").exists() and not (_HOME / "pwned2.txt").exists()
    assert not (_HOME / ".profile").exists()
    assert KEY_MARK in (_HOME / ".ssh" / "id_rsa").read_text()
    _assert_key_never_left(bridge, scripted_model, mark)


async def test_read_only_refuses_claude_codes_writes_in_the_workspace(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    (tmp_path / "kept.txt").write_text("kept\n")
    calls = [
        ["Write", {"file_path": str(tmp_path / "new.txt"), "content": "no"}],
        ["Bash", {"command": "echo gone > kept.txt; cat kept.txt"}],
    ]
    mark = len(scripted_model.requests)
    sandbox = {"mode": "read-only", "network": False}
    await _run(bridge, tmp_path, "script", json.dumps(calls), sandbox=sandbox)
    write, bash = _tool_results(scripted_model, mark)
    assert "sandbox: the sandbox is read-only" in write, write
    assert "Read-only file system" in bash and "kept" in bash, bash
    assert not (tmp_path / "new.txt").exists()
    assert (tmp_path / "kept.txt").read_text() == "kept\n"


async def test_a_sandbox_turned_on_mid_conversation_confines_claude_codes_next_call(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """A Claude Code started without a sandbox runs some calls unasked (EnterWorktree, which runs
    git and its hooks outside any sandbox): the run that turns the sandbox on gets a Claude Code
    that asks about every call, and the sandbox refuses that one."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first"], check=True, timeout=30)
    off = {"mode": "off"}
    first, _ = await _run(bridge, tmp_path, "shell", "echo unconfined > first.txt", sandbox=off)
    assert (tmp_path / "first.txt").read_text() == "unconfined\n"
    mark = len(scripted_model.requests)
    params = {"sessionId": first["sessionId"], "sandbox": SANDBOX}
    calls = json.dumps([["EnterWorktree", {"name": "escape"}]])
    second, _ = await _run(bridge, tmp_path, "script", calls, **params)
    assert second["sessionId"] == first["sessionId"]
    said = _tool_results(scripted_model, mark)[-1]  # the first turn's result is history
    assert "sandbox: EnterWorktree cannot be confined" in said, said
    listed = subprocess.run(
        [*git, "worktree", "list"], capture_output=True, text=True, timeout=30, check=True
    )
    assert len(listed.stdout.splitlines()) == 1, listed.stdout


async def test_in_ask_mode_the_user_approves_the_models_command_and_it_runs_confined(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """The sandbox comes first and the mode after it: the user is asked about the command the
    model wrote (not the bridge's bwrap argv), and what runs is confined; a Write outside the
    workspace is refused by the sandbox without asking."""
    ASKED.clear()
    command = 'echo x > "$HOME/pwned-asked"; echo "home-write=$?"'
    calls = [["Bash", {"command": command}], ["Write", {"file_path": "~/pwned-asked.txt", "content": "x"}]]
    mark = len(scripted_model.requests)
    await _run(bridge, tmp_path, "script", json.dumps(calls), mode="ask")
    bash, write = _tool_results(scripted_model, mark)
    (asked,) = ASKED
    shown = json.dumps(asked)
    assert asked["tool"] == "Bash" and json.dumps(command)[1:-1] in shown and "bwrap" not in shown, shown
    assert "Read-only file system" in bash and "home-write=1" in bash, bash
    assert "sandbox:" in write and "outside the workspace" in write, write
    assert not (_HOME / "pwned-asked").exists() and not (_HOME / "pwned-asked.txt").exists()
