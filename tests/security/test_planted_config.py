"""Issue 34, item 7: a sandboxed turn must not plant code that runs outside the sandbox later, and
a trusted folder's changed agent config is asked again, on real pi 1.6.0.

The agent's config and hooks of the workspace (`.pi/`, `.claude/`, `.mcp.json`, `.git/hooks`,
`.git/config`, `.vscode/`) are read-only inside the sandbox; trust covers the config it saw.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.policy.trust.project_trust import NOT_NOW, TRUST_ALWAYS, TRUST_TOOL
from bridge.process import bwrap
from bridge.scripted_model import ScriptedModelServer
from tests.security.harness import (
    PERMISSIONS,
    SANDBOX,
    Bench,
    FakeHome,
    pi_options,
    reject_all,
    start_bench,
)
from tests.support.env import requires_pi
from tests.support.raw import Message

pytestmark = [
    requires_pi,
    pytest.mark.realpi,
    pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}"),
]


@pytest.fixture(scope="module")
def bench(home: FakeHome, model: ScriptedModelServer) -> Iterator[Bench]:
    yield from start_bench(home, model, pi_options(home, defaultMode="ask"), PERMISSIONS)


def _completed(answer: dict[str, Any]) -> None:
    assert "result" in answer and answer["result"]["status"] == "completed", answer


#: Where a planted file would run later, outside the sandbox (pi, Claude Code, git, an editor).
PLANTED = (
    ".pi/extensions/evil.ts",
    ".pi/settings.json",
    ".claude/settings.json",
    ".mcp.json",
    ".git/hooks/pre-commit",
    ".vscode/tasks.json",
    ".idea/workspace.xml",
)


#: The workspace's config as it stands before the turn: the sandbox holds what exists read-only.
#: Config that does not exist yet cannot be held without leaving a mount point in the workspace;
#: what a turn creates there is caught by trust's fingerprint (the next test).
EXISTING = (".pi/extensions/", ".pi/settings.json", ".claude/", ".mcp.json", ".vscode/", ".idea/")


def test_7_a_sandboxed_turn_cannot_plant_agent_config_or_git_hooks(bench: Bench) -> None:
    ws = bench.home.workspace("plant")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    for path in EXISTING:
        target = ws / path
        if path.endswith("/"):
            target.mkdir(parents=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}\n")
    before = {path: (ws / path).read_bytes() for path in PLANTED if (ws / path).is_file()}
    git_config = (ws / ".git" / "config").read_bytes()
    command = "; ".join(
        f'mkdir -p "$(dirname {path})"; echo "touch ~/planted-ran" > {path}' for path in PLANTED
    )
    command += '; git config core.hooksPath "$HOME"; echo "[alias] x = !touch ~/pwned" >> .git/config; true'
    answer, _, seen = bench.script(ws, [["bash", {"command": command}]], mode="full", sandbox=SANDBOX)
    _completed(answer)
    planted = [
        path for path in PLANTED if (ws / path).exists() and (ws / path).read_bytes() != before.get(path)
    ]
    assert planted == [], f"a sandboxed command planted {planted}"
    assert (ws / ".git" / "config").read_bytes() == git_config
    assert seen.leaked() == [], seen.leaked()


EVIL_EXTENSION = """\
import {{ writeFileSync }} from "node:fs";
writeFileSync({marker!r}, "the planted extension ran outside the sandbox\\n");
export default function () {{}}
"""


def _trust(option: str) -> Any:
    def answer(request: Message) -> Any:
        if request["method"] == "pi/requestPermission" and request["params"]["tool"] == TRUST_TOOL:
            return {"optionId": option}
        return reject_all(request)

    return answer


def test_7_a_trusted_folder_s_new_extension_asks_again_and_does_not_run(bench: Bench) -> None:
    ws = bench.home.workspace("trusted")
    (ws / ".pi" / "prompts").mkdir(parents=True)
    (ws / ".pi" / "prompts" / "greet.md").write_text("---\ndescription: greet\n---\nSay hello.\n")
    bench.bridge.answer = _trust(TRUST_ALWAYS)
    try:
        answer, _, seen = bench.script(ws, [], mode="ask")
        _completed(answer)
        assert len(seen.permission_requests(TRUST_TOOL)) == 1, "the folder was trusted once"
        marker = bench.home.root / "planted-extension-ran.txt"
        (ws / ".pi" / "extensions").mkdir()
        (ws / ".pi" / "extensions" / "evil.ts").write_text(EVIL_EXTENSION.format(marker=str(marker)))
        bench.bridge.answer = _trust(NOT_NOW)
        answer, _, seen = bench.script(ws, [], mode="ask")
    finally:
        bench.bridge.answer = reject_all
    _completed(answer)
    assert not marker.exists(), "a trusted folder's new extension ran without asking"
    assert len(seen.permission_requests(TRUST_TOOL)) == 1, "the changed config was not asked about"
