"""Shared fixtures: bridges under pytest-lsp with the fake pi or the real pi, the scripted model,
and a fresh leak tag per test with a leak check at its end."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from tests.support.env import BRIDGE, begin_test_tag, fake_pi_command, real_pi_available, requires_pi
from tests.support.leaks import assert_no_run_processes, no_run_processes
from tests.support.lsp import bridge_config, initialize

# Defined in tests/support/env.py; kept importable here.
__all__ = ["BRIDGE", "real_pi_available", "requires_pi"]

_own_state_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Every bridge and CLI the tests start keeps its state (rules, trust, checkpoints) in a
    state dir of the test session's own, never the user's: set before xdist starts its workers,
    which inherit it."""
    global _own_state_dir
    if STATE_DIR_ENV not in os.environ:
        _own_state_dir = os.environ[STATE_DIR_ENV] = tempfile.mkdtemp(prefix="pi-bridge-test-state-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _own_state_dir is not None:
        shutil.rmtree(_own_state_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def leak_tag() -> Iterator[str]:
    """A fresh leak tag for the bridges this test starts; at the test's end (after its fixtures'
    teardown), fail it if a process of one of its runs outlived its bridge, and kill that process.
    (The check also covers bridges whose environment was built at import, with the session's tag.)"""
    tag = begin_test_tag()
    yield tag
    no_run_processes(
        timeout=3, orphans_only=True, where="after its bridge, at the end of the test that started it"
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


@pytest_lsp.fixture(config=bridge_config())
async def fake_bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    """A bridge whose pi is tests/fakes/fake_pi.py."""
    await initialize(lsp_client, {"piCommand": fake_pi_command(), "silenceTimeoutMs": 20000})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config())
async def real_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """A bridge running the real pi against the scripted model (provider `fake`), with no spare.

    Its tests run in their own folders, never in the root a spare is primed in: each spare would
    be a pi started for nothing (the warm pool's own tests use `warm_real_bridge`)."""
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config())
async def warm_real_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    """`real_bridge` with the warm pool on, as an editor starts it: a spare pi is kept."""
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()
