"""Shared fixtures: bridges under pytest-lsp with the fake pi or the real pi, and the scripted model."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from tests.harness import (
    PI_BIN,
    assert_no_run_processes,
    bridge_env,
    fake_pi_command,
    initialize,
    make_client,
)

BRIDGE = [sys.executable, "-m", "bridge"]


def real_pi_available() -> bool:
    """Whether the real pi can run here (project-local install or PATH)."""
    return (PI_BIN / "pi").exists() or shutil.which("pi") is not None


requires_pi = pytest.mark.skipif(
    not real_pi_available() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
    reason="real pi is not installed (run .ci/run, or set PI_BRIDGE_REQUIRE_PI=1 to make this fail)",
)


@pytest.fixture(scope="session")
def scripted_model() -> Iterator[ScriptedModelServer]:
    """The project's scripted OpenAI-compatible model on 127.0.0.1."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="session")
def pi_agent_dir(tmp_path_factory: pytest.TempPathFactory, scripted_model: ScriptedModelServer) -> Path:
    """A PI_CODING_AGENT_DIR whose `fake` provider is the scripted model."""
    agent_dir = tmp_path_factory.mktemp("pi-agent")
    write_pi_agent_dir(agent_dir, scripted_model.base_url)
    return agent_dir


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def fake_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """A bridge whose pi is tests/fakes/fake_pi.py."""
    await initialize(lsp_client, {"piCommand": fake_pi_command(), "silenceTimeoutMs": 20000})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=BRIDGE, client_factory=make_client, server_env=bridge_env())
)
async def real_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """A bridge running the real pi against the scripted model (provider `fake`)."""
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()
