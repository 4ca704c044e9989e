"""Approvals on a live Codex: its `item/commandExecution/requestApproval` requests go through the
bridge's gate. The client declares `capabilities.experimental.piBridge.permissions`, so its
conversations start in `ask`: each command Codex asks about comes to it as `pi/requestPermission`,
and its answer is Codex's decision. Judged from the disk and the requests the client got.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.approvals import ALLOW_ONCE, REJECT_ONCE
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.agent_configs import codex_env
from tests.e2e.test_codex import CODEX_BIN, CONFIG
from tests.support.env import ROOT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, contents_of, make_client, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [
    pytest.mark.realpi,
    pytest.mark.skipif(
        not CODEX_BIN.exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
        reason="Codex is not installed in .tools-agents (run scripts/setup.sh)",
    ),
]


class Asked:
    """Every pi/requestPermission the client got, and the option it answers with."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.option = REJECT_ONCE


ASKED = Asked()


def _client() -> LanguageClient:
    client = make_client()

    @client.feature("pi/requestPermission")
    async def on_request(ls: LanguageClient, params: Any) -> Any:
        ASKED.requests.append(params)
        return {"optionId": ASKED.option}

    return client


APPROVING = BridgeServerConfig(
    server_command=CONFIG.server_command, client_factory=_client, extra_env=CONFIG.extra_env
)


@pytest_lsp.fixture(config=APPROVING)
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    ASKED.__init__()  # type: ignore[misc]
    env = codex_env(tmp_path_factory.mktemp("codex-home"), f"http://127.0.0.1:{scripted_model.port}")
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"piBridge": {"permissions": True}}),
            initialization_options={"env": env, "warmPool": False, "silenceTimeoutMs": 60000},
            root_uri=ROOT.as_uri(),
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def touch_run(client: LanguageClient, cwd: Path, name: str) -> tuple[dict[str, Any], list[Any]]:
    result = await request(client, "pi/run", {"prompt": f"touch {name}", "model": "shell", "cwd": str(cwd)})
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return result, messages


async def test_a_rejected_command_never_runs(bridge: LanguageClient, tmp_path: Path) -> None:
    ASKED.option = REJECT_ONCE
    name = f"rejected-{secrets.token_hex(3)}.txt"
    result, messages = await touch_run(bridge, tmp_path, name)
    assert result["status"] == "completed", result
    (asked,) = ASKED.requests
    assert asked["kind"] == "execute" and f"touch {name}" in str(asked)
    (decision,) = contents_of(messages, "permission.resolved")
    assert (decision["decision"], decision["by"]) == ("reject", "user")
    assert not (tmp_path / name).exists(), "the command never ran"


async def test_an_allowed_command_runs(bridge: LanguageClient, tmp_path: Path) -> None:
    ASKED.option = ALLOW_ONCE
    name = f"allowed-{secrets.token_hex(3)}.txt"
    result, messages = await touch_run(bridge, tmp_path, name)
    assert result["status"] == "completed", result
    assert len(ASKED.requests) == 1
    (decision,) = contents_of(messages, "permission.resolved")
    assert decision["decision"] == "allow"
    assert (tmp_path / name).exists(), "the command ran"
    assert contents_of(messages, "tool.completed")
