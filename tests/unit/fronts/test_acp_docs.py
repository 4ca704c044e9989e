"""docs/acp.md's editor snippets: each names a command that starts a working `pi-bridge acp`."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import ROOT, WAIT, bridge_env

DOC = ROOT / "docs" / "acp.md"
EDITORS = ("zed", "jetbrains", "codecompanion", "agent-shell", "acpx")


def _snippets() -> dict[str, str]:
    text = DOC.read_text()
    found = re.findall(r"<!-- acp-snippet: ([\w-]+) -->\n```\w*\n(.*?)```", text, flags=re.S)
    return dict(found)


def _argv(editor: str, snippet: str) -> list[str]:
    """The command line an editor would run, read the way that editor reads its config."""
    if editor in ("zed", "jetbrains"):
        server = json.loads(snippet)["agent_servers"]["pi"]
        return [server["command"], *server["args"]]
    if editor == "acpx":
        return shlex.split(json.loads(snippet)["agents"]["pi"]["command"])
    if editor == "codecompanion":
        match = re.search(r"commands\s*=\s*\{\s*default\s*=\s*\{([^}]*)\}", snippet)
        assert match, "the adapter names its command"
        return re.findall(r'"([^"]*)"', match.group(1))
    if editor == "agent-shell":
        command = re.search(r':command\s+"([^"]+)"', snippet)
        params = re.search(r":command-params\s+'\(([^)]*)\)", snippet)
        assert command and params, "the client maker names its command and params"
        return [command.group(1), *re.findall(r'"([^"]*)"', params.group(1))]
    raise AssertionError(f"no reader for {editor}")


def test_acp_docs_have_a_snippet_for_every_editor() -> None:
    assert sorted(_snippets()) == sorted(EDITORS)


@pytest.mark.parametrize("editor", EDITORS)
def test_acp_docs_snippet_starts_a_working_acp_bridge(editor: str) -> None:
    argv = _argv(editor, _snippets()[editor])
    assert argv[0] == "pi-bridge" and argv[1:] == ["acp"]
    console_script = Path(sys.executable).parent / "pi-bridge"  # what `pip install` puts on PATH
    proc = subprocess.Popen(
        [str(console_script), *argv[1:]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=bridge_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 1
        assert answer["result"]["agentInfo"]["name"] == "pi-bridge"
        assert answer["result"]["agentCapabilities"]["loadSession"] is True
        proc.stdin.close()
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
