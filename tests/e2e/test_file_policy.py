"""pi's own file tools under the bridge's file access policy (bridge/policy/file_access.py), on
real pi with the scripted model's `script` scenario: the model chooses every path, as a prompt
injection would.

Each test reads its outcome from the disk, from every frame the bridge sent to the client, and
from every request the model received; never from what the bridge says of itself. The HOME is a
fake one outside /tmp with a planted SSH key (the sandbox's /tmp is private).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.policy.approvals import ALLOW_ONCE, REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.env import WAIT
from tests.support.raw import RawBridge

pytestmark = [requires_pi, pytest.mark.realpi]

KEY = "-----BEGIN OPENSSH PRIVATE KEY----- planted-for-the-file-policy"
ENV_KEY = f"env-key-{uuid.uuid4().hex}"
INIT_KEY = f"init-key-{uuid.uuid4().hex}"
STATE_SECRET = f"state-secret-{uuid.uuid4().hex}"
INSIDE = "the workspace's own text"
SECRETS = (KEY, ENV_KEY, INIT_KEY, STATE_SECRET)
needs_bwrap = pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}")
SANDBOX = {"mode": "workspace-write", "network": False}


@pytest.fixture
def home() -> Iterator[Path]:
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()
    home = Path(tempfile.mkdtemp(prefix="pi-bridge-policy-home-", dir=base))
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_rsa").write_text(KEY + "\n")
    (home / ".bashrc").write_text("original bashrc\n")
    (home / ".profile").write_text("original profile\n")
    yield home
    shutil.rmtree(home, ignore_errors=True)


class Session:
    """One bridge over raw stdio: every frame it sent, and the approvals it asked (each one
    rejected, but those of the tools in `allow`)."""

    def __init__(
        self,
        home: Path,
        agent_dir: Path,
        mode: str,
        sandbox: dict[str, Any] | None,
        allow: tuple[str, ...] = (),
        engine: str | None = None,
    ) -> None:
        self.state = home / "state"
        self.state.mkdir(exist_ok=True)
        (self.state / "planted.txt").write_text(STATE_SECRET)
        self.asked: list[dict[str, Any]] = []
        self.bridge = RawBridge(
            env={STATE_DIR_ENV: str(self.state), "HOME": str(home), "PROBE_API_KEY": ENV_KEY}
        )

        def answer(message: dict[str, Any]) -> None:
            if message.get("method") == "pi/requestPermission":
                self.asked.append(message["params"])
                allowed = message["params"].get("tool") in allow
                self.bridge.answer(message["id"], {"optionId": ALLOW_ONCE if allowed else REJECT_ONCE})

        self.bridge.on_request = answer
        options: dict[str, Any] = {
            "env": {"PI_CODING_AGENT_DIR": str(agent_dir), "OPS_INIT_API_KEY": INIT_KEY},
            "warmPool": False,
            "defaultMode": mode,
        }
        if sandbox is not None:
            options["sandbox"] = sandbox
        if engine is not None:
            options["engine"] = engine
        self.bridge.initialize(options, {"experimental": {"piBridge": {"permissions": True}}})

    def run(self, model: ScriptedModelServer, cwd: Path, calls: list[list[Any]]) -> list[dict[str, Any]]:
        """Run the model's `calls`; the requests the model received meanwhile."""
        before = len(model.requests)
        params = {
            "prompt": json.dumps(calls),
            "provider": "fake",
            "model": "script",
            "cwd": str(cwd),
            # ls, find and grep are off in pi by default: a user who turns them on gets them
            # through the same policy as read and write.
            "tools": ALL_FILE_TOOLS,
        }
        answered = self.bridge.call("pi/run", params, timeout=WAIT * 2)
        assert answered["result"]["status"] == "completed", answered
        return [r for r in model.requests[before:] if r["body"]]

    def frames(self) -> str:
        return json.dumps(self.bridge.seen)

    def close(self) -> None:
        self.bridge.close()


ALL_FILE_TOOLS = ["read", "bash", "edit", "write", "ls", "find", "grep"]


def _tool_results(requests: list[dict[str, Any]]) -> str:
    """Every tool result the model was given (its last request holds them all)."""
    messages = requests[-1]["body"].get("messages", [])
    return json.dumps([m for m in messages if m.get("role") == "tool"])


def _assert_no_secret(session: Session, requests: list[dict[str, Any]]) -> None:
    sent = session.frames() + json.dumps([r["body"] for r in requests])
    for secret in SECRETS:
        assert secret not in sent


@pytest.mark.parametrize(
    ("mode", "sandbox"),
    [("full", None), pytest.param("plan", SANDBOX, marks=needs_bwrap)],
    ids=["full", "plan-sandboxed"],
)
def test_reads_of_secrets_environ_and_state_reach_neither_client_nor_model(
    home: Path,
    pi_agent_dir: Path,
    scripted_model: ScriptedModelServer,
    tmp_path: Path,
    mode: str,
    sandbox: Any,
) -> None:
    (tmp_path / "inside.txt").write_text(INSIDE)
    session = Session(home, pi_agent_dir, mode, sandbox)
    try:
        calls = [
            ["read", {"path": "~/.ssh/id_rsa"}],
            ["read", {"path": (home / ".ssh" / "id_rsa").as_uri()}],
            ["read", {"path": "/proc/self/environ"}],
            ["read", {"path": str(session.state / "planted.txt")}],
            ["ls", {"path": str(session.state)}],
            ["grep", {"pattern": "planted", "path": str(home)}],
            ["read", {"path": "inside.txt"}],
        ]
        requests = session.run(scripted_model, tmp_path, calls)
        _assert_no_secret(session, requests)
        results = _tool_results(requests)
        assert INSIDE in results  # the tools ran, and a plain read still works
        assert results.count("hidden from the agent's tools") >= 5, results
        assert f"{session.state} is hidden from the agent's tools" in results  # not even listed
    finally:
        session.close()


@needs_bwrap
def test_sandboxed_writes_never_leave_the_workspace(
    home: Path, pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    (tmp_path / "dangling").symlink_to(home / ".profile-new")
    (tmp_path / "to-profile").symlink_to(home / ".profile")
    session = Session(home, pi_agent_dir, "full", SANDBOX)
    try:
        calls = [
            ["bash", {"command": f"ln -s {home}/.profile made-by-bash && ln -s {home}/.new made-dangling"}],
            ["write", {"path": "made-by-bash", "content": "pwned\n"}],
            ["write", {"path": "made-dangling", "content": "pwned\n"}],
            ["write", {"path": "~/pwned.txt", "content": "pwned\n"}],
            ["write", {"path": (home / "pwned-url.txt").as_uri(), "content": "pwned\n"}],
            ["write", {"path": "dangling", "content": "pwned\n"}],
            ["write", {"path": "to-profile", "content": "pwned\n"}],
            ["edit", {"path": "to-profile", "edits": [{"oldText": "original", "newText": "pwned"}]}],
            ["write", {"path": ".pi/extensions/evil.ts", "content": "pwned\n"}],
            ["write", {"path": ".git/hooks/pre-commit", "content": "pwned\n"}],
            ["write", {"path": str(session.state / "rules.json"), "content": "{}"}],
            ["write", {"path": "~/.ssh/id_rsa", "content": "pwned\n"}],
            ["edit", {"path": "~/.ssh/id_rsa", "edits": [{"oldText": "PRIVATE", "newText": "pwned"}]}],
            ["write", {"path": "inside.txt", "content": INSIDE}],
        ]
        requests = session.run(scripted_model, tmp_path, calls)
        assert not (home / "pwned.txt").exists()
        assert not (home / "pwned-url.txt").exists()
        assert not (home / ".profile-new").exists() and not (home / ".new").exists()
        assert (tmp_path / "made-by-bash").is_symlink()  # the sandboxed command made its links
        assert (home / ".profile").read_text() == "original profile\n"
        assert not (tmp_path / ".pi").exists() and not (tmp_path / ".git").exists()
        rules = session.state / "rules.json"
        assert not rules.exists() or "pwned" not in rules.read_text(errors="replace")
        assert (home / ".ssh" / "id_rsa").read_text() == KEY + "\n"
        assert (tmp_path / "inside.txt").read_text() == INSIDE
        said = [json.loads(_tool_results(requests))[i]["content"] for i in range(len(calls))]
        assert all("sandbox:" in text or "refused:" in text for text in said[1:-1]), said
        _assert_no_secret(session, requests)
    finally:
        session.close()


def test_auto_edit_asks_for_home_files_and_agent_config_and_not_for_the_workspace(
    home: Path, pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    session = Session(home, pi_agent_dir, "auto-edit", None)
    asked_paths = ["~/.bashrc", (home / ".bashrc").as_uri(), ".pi/extensions/x.ts", ".git/hooks/pre-commit"]
    try:
        calls = [["write", {"path": path, "content": "pwned\n"}] for path in asked_paths]
        calls.append(["write", {"path": "inside.txt", "content": INSIDE}])
        session.run(scripted_model, tmp_path, calls)
        assert [asked["input"]["path"] for asked in session.asked] == asked_paths
        assert (home / ".bashrc").read_text() == "original bashrc\n"
        assert not (tmp_path / ".pi").exists() and not (tmp_path / ".git").exists()
        assert (tmp_path / "inside.txt").read_text() == INSIDE  # inside the workspace: unasked
    finally:
        session.close()


def test_an_approval_diff_never_shows_proc_environ(
    home: Path, pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    session = Session(home, pi_agent_dir, "ask", None)
    try:
        edit = {"path": "/proc/self/environ", "edits": [{"oldText": "PROBE_API_KEY", "newText": "x"}]}
        requests = session.run(
            scripted_model, tmp_path, [["edit", edit], ["read", {"path": "/proc/self/environ"}]]
        )
        _assert_no_secret(session, requests)
        assert "hidden from the agent's tools" in _tool_results(requests)
    finally:
        session.close()


def test_a_deleted_mode_file_means_ask(
    home: Path, pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """An approved command of an `ask` conversation deletes the modes dir: the next call is still
    asked (a missing mode file once meant `full`, and the write ran unasked)."""
    session = Session(home, pi_agent_dir, "ask", None, allow=("bash",))
    try:
        calls = [
            ["bash", {"command": f"rm -rf {session.state / 'modes'}"}],
            ["write", {"path": "after.txt", "content": "x\n"}],
        ]
        session.run(scripted_model, tmp_path, calls)
        assert not (session.state / "modes").exists() or not any((session.state / "modes").iterdir())
        assert [asked["tool"] for asked in session.asked] == ["bash", "write"]
        assert not (tmp_path / "after.txt").exists()
    finally:
        session.close()


def test_the_json_engine_keeps_the_kernel_trees_and_the_state_dir_out(
    home: Path, pi_agent_dir: Path, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """`--mode json` has no channel to the bridge: the extension's own check refuses there."""
    (tmp_path / "inside.txt").write_text(INSIDE)
    session = Session(home, pi_agent_dir, "full", None, engine="json")
    try:
        calls = [
            ["read", {"path": "/proc/self/environ"}],
            ["read", {"path": "file:///proc/self/environ"}],
            ["read", {"path": str(session.state / "planted.txt")}],
            ["read", {"path": "inside.txt"}],
        ]
        requests = session.run(scripted_model, tmp_path, calls)
        sent = session.frames() + json.dumps([r["body"] for r in requests])
        assert ENV_KEY not in sent and INIT_KEY not in sent and STATE_SECRET not in sent
        results = _tool_results(requests)
        assert INSIDE in results and results.count("hidden from the agent's tools") == 3, results
    finally:
        session.close()
