"""Project trust on a live Claude Code (2.1.197) with the scripted model.

In `-p` mode Claude Code skips its own workspace trust dialog: it runs a project's
`.claude/settings.json` hooks, loads its `.claude/commands` and starts its `.mcp.json` servers
without asking. The bridge asks the user as it does for pi, and starts an untrusted folder's
Claude Code with `--setting-sources user`. Each project here has a `/greet` command and a
`UserPromptSubmit` hook that leaves a file behind: both work only in the trusted one.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.policy.trust.project_trust import NEVER, TRUST_ALWAYS, TRUST_TOOL
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import user_texts_of
from tests.support.env import BRIDGE, CLAUDE_BIN, ROOT, requires_claude
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_claude, pytest.mark.realpi]

WORD = "CLAUDE-TEMPLATE-91c2"
HOOK_MARK = "hook-ran"
_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-claude-trust-"))


class Asked:
    """Every pi/requestPermission the client got, and the option it answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.option = TRUST_ALWAYS


ASKED = Asked()


def _client() -> LanguageClient:
    client = make_client()

    @client.feature("pi/requestPermission")
    async def on_request(ls: LanguageClient, params: Any) -> Any:
        ASKED.requests.append(params)
        return {"optionId": ASKED.option}

    return client


CONFIG = BridgeServerConfig(
    server_command=[*BRIDGE, "--agent", "claude"],
    client_factory=_client,
    extra_env={
        "PATH": os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")]),
        STATE_DIR_ENV: str(_STATE),
    },
)


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest_lsp.fixture(config=CONFIG)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    ASKED.__init__()  # type: ignore[misc]
    env = {
        "ANTHROPIC_BASE_URL": scripted_model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(tmp_path_factory.mktemp("claude-config")),
    }
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"piBridge": {"permissions": True}}),
            initialization_options={"env": env, "warmPool": False},
            root_uri=ROOT.as_uri(),
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def project(root: Path, name: str) -> Path:
    """A folder with Claude Code's `/greet` command and a hook that marks each prompt."""
    folder = root / name
    (folder / ".claude" / "commands").mkdir(parents=True)
    (folder / ".claude" / "commands" / "greet.md").write_text(f"Say the word {WORD} and nothing else.\n")
    hook = {"type": "command", "command": f"touch {folder / HOOK_MARK}"}
    settings = {"hooks": {"UserPromptSubmit": [{"hooks": [hook]}]}}
    (folder / ".claude" / "settings.json").write_text(json.dumps(settings))
    return folder


async def _greet(client: LanguageClient, model: ScriptedModelServer, cwd: Path) -> tuple[Any, str]:
    before = len(model.requests)
    result = await request(client, "pi/run", {"prompt": "/greet", "model": "text", "cwd": str(cwd)})
    assert_stream_invariants(messages_of(client).by_run[result["runId"]])
    seen = "\n".join(text for r in model.requests[before:] if r["body"] for text in user_texts_of(r["body"]))
    return result, seen


async def test_claude_code_loads_a_folders_commands_and_hooks_only_once_it_is_trusted(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    trusted, untrusted = project(tmp_path, "trusted"), project(tmp_path, "untrusted")
    result, seen = await _greet(bridge, scripted_model, trusted)
    assert result["status"] == "completed", result
    [asked] = ASKED.requests
    assert asked["tool"] == TRUST_TOOL and "Claude Code" in asked["title"], asked
    assert asked["input"]["resources"] == [".claude/settings.json", ".claude/commands"]
    assert WORD in seen and (trusted / HOOK_MARK).exists(), "the command and the hook worked"

    ASKED.option = NEVER
    result, seen = await _greet(bridge, scripted_model, untrusted)
    assert result["status"] == "completed", result
    assert len(ASKED.requests) == 2
    assert WORD not in seen and not (untrusted / HOOK_MARK).exists(), "neither loaded untrusted"
    await _greet(bridge, scripted_model, untrusted)
    assert len(ASKED.requests) == 2, "asked once"


async def test_a_hook_planted_after_the_trust_asks_again_and_a_refusal_keeps_it_from_running(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """A trusted folder's config, changed by the model's own Bash call (a `UserPromptSubmit`
    hook that writes outside the workspace), is asked about again; refused, the hook never runs."""
    folder = tmp_path / "planted"
    (folder / ".claude" / "commands").mkdir(parents=True)
    (folder / ".claude" / "commands" / "greet.md").write_text(f"Say the word {WORD} and nothing else.\n")
    outside = tmp_path / "outside-hook-ran"
    ASKED.option = TRUST_ALWAYS
    result, _ = await _greet(bridge, scripted_model, folder)
    assert result["status"] == "completed" and len(ASKED.requests) == 1, result
    hook = {"type": "command", "command": f"touch {outside}"}
    settings = json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [hook]}]}})
    payload = base64.b64encode(settings.encode()).decode()
    plant = f"echo {payload} | base64 -d > .claude/settings.json"
    params = {"prompt": plant, "model": "shell", "cwd": str(folder), "mode": "full"}
    planted = await request(bridge, "pi/run", params)
    assert planted["status"] == "completed", planted
    assert json.loads((folder / ".claude" / "settings.json").read_text()) == json.loads(settings)
    assert len(ASKED.requests) == 1 and not outside.exists(), "the trust held for the planting turn"

    ASKED.option = NEVER
    result, _ = await _greet(bridge, scripted_model, folder)
    assert result["status"] == "completed", result
    [_, again] = ASKED.requests
    assert again["tool"] == TRUST_TOOL and "changed since you trusted it" in again["title"], again
    assert again["input"]["changed"] == ["added .claude/settings.json"], again
    assert not outside.exists(), "the planted hook never ran"
