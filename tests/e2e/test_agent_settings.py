"""initializationOptions.agents in the object form ({command, protocol, env}), end to end: a
custom-named ACP agent (pi-acp driving the real pi, against the scripted model) runs by that
configuration alone, as does a second pi under its own name, a bad entry is a warning naming its
field, and a secret of the agent's own env reaches no frame and no log line, even when the
agent's command prints its environment, and no bash of pi's.
Judged from every byte the bridge wrote and from its DEBUG log.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from tests.support.env import PI_BIN, ROOT, requires_pi
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

ACP_BIN = ROOT / ".tools-acp" / "node_modules" / ".bin"
requires_pi_acp = pytest.mark.skipif(
    not (ACP_BIN / "pi-acp").exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
    reason="pi-acp is not installed in .tools-acp (run scripts/setup.sh)",
)
pytestmark = [requires_pi, requires_pi_acp, pytest.mark.realpi, pytest.mark.slow]

AGENT_SECRET = "sk-agent-Own0a1b2c3d4e5f6a7b8c9"
# Homes outside /tmp, like tests/e2e/test_secret_values.py.
_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()


class _RecordingBridge(RawBridge):
    """A RawBridge that also keeps every frame's body as the bytes it was written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.raw: list[bytes] = []
        super().__init__(*args, **kwargs)

    def received(self, now: float, bodies: list[bytes]) -> None:
        self.raw.extend(bodies)
        super().received(now, bodies)


@pytest.fixture
def root() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="pi-bridge-agent-settings-", dir=_BASE))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_custom_acp_agent_configured_by_the_object_form_runs_and_keeps_its_secrets(
    root: Path, scripted_model: ScriptedModelServer
) -> None:
    agent_dir = root / "agent"
    write_pi_agent_dir(agent_dir, scripted_model.base_url)
    workspace = root / "work"
    workspace.mkdir()
    log = root / "bridge.log"
    path = os.pathsep.join([str(ACP_BIN), str(PI_BIN), os.environ.get("PATH", "")])
    bridge = _RecordingBridge(["--log-level", "DEBUG"], {"HOME": str(root), "PATH": path}, log_file=log)
    try:
        answer = bridge.initialize(
            {
                "warmPool": False,
                "defaultMode": "full",
                "agents": {
                    # pi-acp under a name the bridge does not know: the object form alone makes it
                    "my-acp": {
                        "command": ["pi-acp"],
                        "protocol": "acp",
                        "env": {
                            "PI_CODING_AGENT_DIR": str(agent_dir),
                            "NPM_CONFIG_OFFLINE": "true",
                            "MY_AGENT_TOKEN": AGENT_SECRET,
                        },
                    },
                    # a second configuration of pi under its own name: its bash gets no name of its env
                    "pi-work": {
                        "command": ["pi"],
                        "protocol": "pi",
                        "env": {"PI_CODING_AGENT_DIR": str(agent_dir), "WORK_TOKEN": AGENT_SECRET},
                    },
                    "bad-protocol": {"command": ["x"], "protocol": "telnet"},
                    "bad-field": {"command": ["x"], "protocol": "acp", "environment": {}},
                    "no-command": {"protocol": "acp"},
                },
            }
        )
        listed = {
            agent["name"]: agent
            for agent in answer["result"]["capabilities"]["experimental"]["piBridge"]["agents"]
        }
        assert listed["my-acp"]["protocol"] == "acp" and listed["my-acp"]["command"] == ["pi-acp"]
        assert listed["my-acp"]["found"] is True
        assert not {"bad-protocol", "bad-field", "no-command"} & set(listed), "a bad entry is not an agent"
        warnings = [m["params"]["message"] for m in bridge.messages if m.get("method") == "window/logMessage"]
        for field in ("bad-protocol.protocol", "bad-field.environment", "no-command.command"):
            assert any(f"initializationOptions.agents.{field}:" in w for w in warnings), (field, warnings)
        # the agent's command prints its own environment (pi's, inherited from pi-acp)
        reply = bridge.call(
            "pi/run",
            {
                "prompt": "tr '\\0' '\\n' < /proc/$PPID/environ; echo MARK-$((6*7))",
                "agent": "my-acp",
                "model": "fake/shell",
                "cwd": str(workspace),
            },
            timeout=120,
        )
        assert "result" in reply, reply
        result = reply["result"]
        assert result["status"] == "completed", result
        assert_stream_invariants(bridge.run_messages(result["runId"]))
        assert "MARK-42" in result["text"], "the command ran, under the configured agent"
        assert "MY_AGENT_TOKEN=" in result["text"], "the agent's env reached its process"
        reply = bridge.call(
            "pi/run",
            {
                "prompt": 'echo "[${WORK_TOKEN:-unset}]"',
                "agent": "pi-work",
                "provider": "fake",
                "model": "shell",
                "cwd": str(workspace),
            },
            timeout=120,
        )
        assert reply["result"]["status"] == "completed", reply
        assert "[unset]" in reply["result"]["text"], "pi's bash gets no variable of the agent's own env"
        assert listed["pi-work"]["protocol"] == "pi"
        runs = bridge.call("pi/runs", {})["result"]
        assert [e for e in runs["live"] if e["sessionId"] == result["sessionId"]], "its conversation is live"
    finally:
        assert bridge.shutdown() == 0
        bridge.close()
    wire = b"\n".join(bridge.raw)
    text = log.read_text(errors="replace")
    for piece in (AGENT_SECRET, AGENT_SECRET[-12:]):
        assert piece.encode() not in wire, "the agent's secret reached the client"
        assert piece not in text, "the agent's secret reached the log"
