"""Issue 34, items 8 and 9 seen from the secrets side: no key value reaches the client or the model.

Real pi 1.6.0 against the scripted model, over raw stdio: the `shell` scenario runs the prompt as
a bash command and answers with what it printed, so the model's own commands go after the keys.
Keys are planted four ways: the bridge's environment (`X_API_KEY`), initializationOptions.env (a
secret-named one and one whose name says nothing but whose value looks like a key), an MCP
server's env, and pi's auth.json. Each test judges from every byte of every frame the bridge
wrote, from every request the scripted model received, and from the bridge's DEBUG log, never
from what the bridge says of itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.policy.approvals import REJECT_ONCE
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from bridge.scripted_model.scenarios import EDIT_NEW, EDIT_OLD
from tests.support.acp import RawAcp
from tests.support.env import ROOT, requires_pi
from tests.support.raw import Message, RawBridge
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

FROM_BRIDGE = "sk-bridge-Env0a1b2c3d4e5f6a7b8c9d"
FROM_OPTIONS = "sk-options-Env9f8e7d6c5b4a3f2e1d0c"
FROM_OPTIONS_UNNAMED = "Qz7Kp2Lm9Xw4Rt6Yv8Nb3Hd5"  # under a name that says nothing
FROM_MCP = "mcp-Secret-3c5e7a9b1d2f4a6c8e0b"
FROM_AUTH = "sk-ant-auth-Json4d6f8a0c2e4b6d8f0a1c"
SECRETS = {
    "the bridge's env": FROM_BRIDGE,
    "initializationOptions.env": FROM_OPTIONS,
    "initializationOptions.env (unnamed)": FROM_OPTIONS_UNNAMED,
    "an MCP server's env": FROM_MCP,
    "auth.json": FROM_AUTH,
}
MASK = "[redacted]"
PERMISSIONS = {"experimental": {"piBridge": {"permissions": True}}}
MCP_FIXTURE = ROOT / "tests" / "fixtures" / "mcp_server.py"
# Homes and state outside /tmp, like tests/e2e/test_sandbox.py (a sandbox's /tmp is private).
_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()


class _RecordingBridge(RawBridge):
    """A RawBridge that also keeps every frame's body as the bytes it was written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.raw: list[bytes] = []
        super().__init__(*args, **kwargs)

    def received(self, now: float, bodies: list[bytes]) -> None:
        self.raw.extend(bodies)
        super().received(now, bodies)


class _Setup:
    """One bridge with the planted keys, and where to look for them."""

    def __init__(self, root: Path, model: ScriptedModelServer) -> None:
        self.root = root
        self.model = model
        self.home = root / "home"
        self.home.mkdir()
        self.agent_dir = root / "agent"
        write_pi_agent_dir(self.agent_dir, model.base_url)
        (self.agent_dir / "auth.json").write_text(
            json.dumps({"anthropic": {"type": "api_key", "key": FROM_AUTH}})
        )
        self.state = root / "state"
        self.log = root / "bridge.log"
        self.workspace = root / "work"
        self.workspace.mkdir()
        self.first_request = len(model.requests)
        self.asked: list[Message] = []
        self.bridge = _RecordingBridge(
            ["--log-level", "DEBUG"],
            {"HOME": str(self.home), STATE_DIR_ENV: str(self.state), "X_API_KEY": FROM_BRIDGE},
            log_file=self.log,
        )
        self.bridge.on_request = self._on_request
        self.bridge.initialize(
            {
                "env": {
                    "PI_CODING_AGENT_DIR": str(self.agent_dir),
                    "OPENAI_API_KEY": FROM_OPTIONS,
                    "PLAIN_SETTING": FROM_OPTIONS_UNNAMED,
                },
                "warmPool": False,
                "defaultMode": "full",
            },
            capabilities=PERMISSIONS,
        )

    def _on_request(self, message: Message) -> None:
        if message.get("method") == "pi/requestPermission":
            self.asked.append(message)
            # answered off the reader thread: the bridge is written to from here
            threading.Thread(
                target=self.bridge.answer, args=(message["id"], {"optionId": REJECT_ONCE, "message": "no"})
            ).start()

    def shell(self, command: str, **params: Any) -> tuple[dict[str, Any], list[Message]]:
        """One `shell` run of `command`: its answer and messages (stream invariants checked)."""
        answer = self.bridge.call(
            "pi/run",
            {
                "prompt": command,
                "provider": "fake",
                "model": "shell",
                "cwd": str(self.workspace),
                "sessionId": None,
                **params,
            },
            timeout=120,
        )
        assert "result" in answer, answer
        messages = self.bridge.run_messages(answer["result"]["runId"])
        assert_stream_invariants(messages)
        return answer["result"], messages

    def model_bytes(self) -> str:
        """Every request the scripted model received in this test, as JSON text."""
        return json.dumps([r["body"] for r in self.model.requests[self.first_request :]], ensure_ascii=False)

    def assert_nowhere(self) -> None:
        """No planted key, nor its last 12 characters, in any frame, model request or log line."""
        wire = b"\n".join(self.bridge.raw)
        model = self.model_bytes()
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        for where, secret in SECRETS.items():
            for piece in (secret, secret[-12:]):
                assert piece.encode() not in wire, f"the key from {where} reached the client"
                assert piece not in model, f"the key from {where} reached the model"
                assert piece not in log, f"the key from {where} reached the log"


@pytest.fixture
def setup(scripted_model: ScriptedModelServer) -> Iterator[_Setup]:
    root = Path(tempfile.mkdtemp(prefix="pi-bridge-secrets-", dir=_BASE))
    made = _Setup(root, scripted_model)
    try:
        yield made
    finally:
        assert made.bridge.shutdown() == 0
        made.bridge.close()
        shutil.rmtree(root, ignore_errors=True)


def _tool_output(messages: list[Message]) -> str:
    ended = [m["content"] for m in messages if m["type"] in ("tool.completed", "tool.failed")]
    assert len(ended) == 1, messages
    return str(ended[0].get("output") or ended[0].get("error") or "")


def test_the_bash_tool_gets_no_key_variable(setup: _Setup) -> None:
    """A command sees neither the bridge's key, the client's variables, nor the bridge's own."""
    result, messages = setup.shell(
        'echo "[${X_API_KEY:-unset}][${OPENAI_API_KEY:-unset}][${PLAIN_SETTING:-unset}]'
        '[${PI_CODING_AGENT_DIR:-unset}][${PI_BRIDGE_GATE_DIR:-unset}]"; env'
    )
    assert result["status"] == "completed", result
    output = _tool_output(messages)
    assert "[unset][unset][unset][unset][unset]" in output, output
    assert "PATH=" in output, "env did run"
    setup.assert_nowhere()


def test_keys_read_from_the_agents_environment_are_masked_for_client_and_model(setup: _Setup) -> None:
    """pi's own environment holds every key: what a command prints of it reaches the client and the
    model masked (was: both saw the keys, issue 34 item 8)."""
    result, messages = setup.shell("tr '\\0' '\\n' < /proc/$PPID/environ")
    assert result["status"] == "completed", result
    output = _tool_output(messages)
    assert "OPENAI_API_KEY=" + MASK in output and "X_API_KEY=" + MASK in output, output
    assert "PLAIN_SETTING=" + MASK in output, output
    assert MASK in setup.model_bytes(), "the model got the output, masked"
    setup.assert_nowhere()


def test_auth_json_and_the_mcp_config_are_masked(setup: _Setup) -> None:
    """pi's auth.json and the private MCP config file, read by a command: their keys masked."""
    server = {
        "name": "fixture",
        "command": sys.executable,
        "args": [str(MCP_FIXTURE)],
        "env": [{"name": "MCP_FIXTURE_SECRET", "value": FROM_MCP}],
    }
    command = f'cat "{setup.agent_dir}/auth.json"; echo; cat {setup.state}/mcp/*/*.json'
    result, messages = setup.shell(command, mcpServers=[server])
    assert result["status"] == "completed", result
    output = _tool_output(messages)
    assert f'"key":"{MASK}"' in output.replace(" ", ""), output
    assert f'"MCP_FIXTURE_SECRET":"{MASK}"' in output, output
    setup.assert_nowhere()


def test_an_approval_of_an_edit_whose_diff_holds_a_key_is_masked(setup: _Setup) -> None:
    """In `ask`, the approval request of an edit carries its diff: a key in the file is masked
    there and in every frame of the run (was: the diff held it, issue 34 item 9)."""
    target = setup.workspace / ".env"
    target.write_text(f"OPENAI_API_KEY={FROM_OPTIONS}\nX={FROM_BRIDGE}\n{EDIT_OLD}\n")
    # `script` makes pi's edit call, then answers with its result and ends (no slow tail to wait out).
    edit = {"path": str(target), "edits": [{"oldText": EDIT_OLD, "newText": EDIT_NEW}]}
    answer = setup.bridge.call(
        "pi/run",
        {
            "prompt": json.dumps([["edit", edit]]),
            "provider": "fake",
            "model": "script",
            "cwd": str(setup.workspace),
            "mode": "ask",
        },
        timeout=120,
    )
    assert "result" in answer, answer
    assert len(setup.asked) == 1, setup.asked
    diff = setup.asked[0]["params"]["diff"]
    assert diff["oldText"].startswith(f"OPENAI_API_KEY={MASK}\nX={MASK}\n"), diff
    assert target.read_text().endswith(f"{EDIT_OLD}\n"), "the edit was refused: the file is as it was"
    setup.assert_nowhere()


class _RecordingAcp(RawAcp):
    """A RawAcp that also keeps every line as the bytes it was written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.raw: list[bytes] = []
        super().__init__(*args, **kwargs)

    def received(self, now: float, bodies: list[bytes]) -> None:
        self.raw.extend(bodies)
        super().received(now, bodies)


def test_acp_the_keys_a_command_prints_are_masked_for_client_and_model(
    scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """The ACP front: pi's environment, auth.json and the MCP config read by the model's command
    reach the client's lines and the model masked."""
    setup_root = Path(tempfile.mkdtemp(prefix="pi-bridge-secrets-acp-", dir=_BASE))
    agent_dir, state, workspace = setup_root / "agent", setup_root / "state", setup_root / "work"
    write_pi_agent_dir(agent_dir, scripted_model.base_url)
    (agent_dir / "auth.json").write_text(json.dumps({"anthropic": {"type": "api_key", "key": FROM_AUTH}}))
    workspace.mkdir()
    first_request = len(scripted_model.requests)
    bridge = _RecordingAcp(
        agent_dir, workspace, extra_env={"X_API_KEY": FROM_BRIDGE, STATE_DIR_ENV: str(state)}
    )
    try:
        bridge.request("initialize", {"protocolVersion": 1, "_meta": {"piBridge": {"defaultMode": "full"}}})
        server = {
            "name": "fixture",
            "command": sys.executable,
            "args": [str(MCP_FIXTURE)],
            "env": [{"name": "MCP_FIXTURE_SECRET", "value": FROM_MCP}],
        }
        opened = bridge.request("session/new", {"cwd": str(workspace), "mcpServers": [server]})
        session_id = opened["result"]["sessionId"]
        chosen = bridge.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": "fake/shell"}
        )
        assert "result" in chosen, chosen
        command = (
            f"tr '\\0' '\\n' < /proc/$PPID/environ; cat \"{agent_dir}/auth.json\"; cat {state}/mcp/*/*.json"
        )
        answer = bridge.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": command}]}
        )
        assert answer.get("result", {}).get("stopReason") == "end_turn", answer
    finally:
        code = bridge.close()
        shutil.rmtree(setup_root, ignore_errors=True)
    assert code == 0
    wire = b"\n".join(bridge.raw)
    assert b"X_API_KEY=" + MASK.encode() in wire, "the command's output reached the client, masked"
    model = json.dumps([r["body"] for r in scripted_model.requests[first_request:]], ensure_ascii=False)
    assert "X_API_KEY=" + MASK in model, "the model got the output, masked"
    for where, secret in SECRETS.items():
        if where.startswith("initializationOptions"):
            continue  # the ACP front has no initializationOptions
        for piece in (secret, secret[-12:]):
            assert piece.encode() not in wire, f"the key from {where} reached the client"
            assert piece not in model, f"the key from {where} reached the model"


def test_a_key_the_model_streams_in_pieces_is_masked_whole(setup: _Setup) -> None:
    """The `echo` scenario streams its answer in 16-character deltas, so the key in it is cut
    across three of them: no delta carries any piece of it, and the deltas still add up to the
    whole answer, masked. (The prompt itself is the user's and reaches the model as it is.)
    A loaded machine may join the deltas before the bridge maps them; the frame's mask holds
    then, and tests/unit/policy/test_redact.py cuts a stream at every place without timing."""
    answer = setup.bridge.call(
        "pi/run",
        {
            "prompt": f"say {FROM_BRIDGE} now",
            "provider": "fake",
            "model": "echo",
            "cwd": str(setup.workspace),
        },
        timeout=120,
    )
    assert answer["result"]["status"] == "completed", answer
    messages = setup.bridge.run_messages(answer["result"]["runId"])
    assert_stream_invariants(messages)
    deltas = [m["content"]["text"] for m in messages if m["type"] == "assistant"]
    assert "".join(deltas) == f"ECHO:say {MASK} now", deltas
    wire = b"\n".join(setup.bridge.raw)
    unique = FROM_BRIDGE[len("sk-bridge-") :]  # "pi-bridge" is in the wire anyway
    for i in range(len(unique) - 6):
        assert unique[i : i + 6].encode() not in wire, f"a piece of the key reached the client: {deltas}"


def test_a_key_rotated_in_auth_json_mid_conversation_is_masked(setup: _Setup) -> None:
    """pi's auth.json gets a new key while the conversation's pi is live (a login, a rotation), of
    the same length and with its old mtime put back: the next command that prints the file still
    has the new key masked, in its streamed output and its result, for the client and the model
    (the bridge and pi's extension read the file again when its inode, ctime or size changed; the
    mtime and size alone said "unchanged", and the bridge looked at most once a second)."""
    auth = setup.agent_dir / "auth.json"
    first, messages = setup.shell(f'cat "{auth}"')
    assert first["status"] == "completed", first
    assert MASK in _tool_output(messages)
    rotated = "sk-ant-rotd-Json" + os.urandom(10).hex()[: len(FROM_AUTH) - 16]
    assert len(rotated) == len(FROM_AUTH)
    before = auth.stat()
    with auth.open("r+") as handle:  # in place: the same inode, the same size
        handle.write(auth.read_text().replace(FROM_AUTH, rotated))
    os.utime(auth, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert auth.stat().st_size == before.st_size and auth.stat().st_mtime_ns == before.st_mtime_ns
    second, messages = setup.shell(f'cat "{auth}"', sessionId=first["sessionId"])
    assert second["status"] == "completed" and second["sessionId"] == first["sessionId"], second
    assert f'"key":"{MASK}"' in _tool_output(messages).replace(" ", ""), _tool_output(messages)
    wire = b"\n".join(setup.bridge.raw)
    for piece in (rotated, rotated[-12:]):
        assert piece.encode() not in wire, "the rotated key reached the client"
        assert piece not in setup.model_bytes(), "the rotated key reached the model"
    setup.assert_nowhere()
