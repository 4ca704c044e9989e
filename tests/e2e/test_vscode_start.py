"""A bridge started as VS Code starts it (issue 38): the initialize VS Code's LanguageClient sends
(its capabilities, the extension's piBridge.permissions, a workspace folder, initializationOptions
with the agents' env and the warm pool on), then initialized and a didOpen. What `initialized`
starts must happen (the warm live agent, seen in pi/runs warmPids) and the bridge's stderr must
carry no error. With sniffio importable (VS Code's bundled libraries have it) anyio cannot tell
its event loop outside a task, where pygls calls a sync notification handler."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from lsprotocol.converters import get_converter
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import ROOT, WAIT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, request

pytestmark = [requires_pi, pytest.mark.realpi]

# What vscode-languageclient 11 declares that the bridge reads, and the extension's own addition.
VSCODE_CAPABILITIES = {
    "workspace": {
        "applyEdit": True,
        "workspaceEdit": {"documentChanges": True},
        "didChangeConfiguration": {"dynamicRegistration": True},
        "workspaceFolders": True,
        "configuration": True,
    },
    "textDocument": {"synchronization": {"dynamicRegistration": True, "didSave": True}},
    "window": {"workDoneProgress": True},
    "experimental": {"piBridge": {"permissions": True}},
}


@pytest_lsp.fixture(config=bridge_config())
async def vscode(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def _warm_pids(client: LanguageClient, timeout: float = WAIT) -> list[int]:
    deadline = time.monotonic() + timeout
    while not (pids := (await request(client, "pi/runs", None))["warmPids"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"no warm agent within {timeout} s of initialized")
        await asyncio.sleep(0.05)
    return list(pids)


async def test_what_initialized_starts_happens_and_the_log_has_no_error(
    vscode: LanguageClient, pi_agent_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert importlib.util.find_spec("sniffio") is not None, "the condition VS Code's bundle has"
    params = get_converter().structure(  # as VS Code sends it
        {
            "processId": os.getpid(),
            "clientInfo": {"name": "Visual Studio Code", "version": "1.106.0"},
            "locale": "en",
            "rootUri": ROOT.as_uri(),
            "workspaceFolders": [{"uri": ROOT.as_uri(), "name": ROOT.name}],
            "capabilities": VSCODE_CAPABILITIES,
            "trace": "off",
            "initializationOptions": {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}},
        },
        types.InitializeParams,
    )
    await vscode.initialize_session(params)  # initialize, then initialized
    readme = ROOT / "README.md"
    item = types.TextDocumentItem(uri=readme.as_uri(), language_id="markdown", version=1, text="typed\n")
    vscode.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
    assert await _warm_pids(vscode)
    await request(vscode, "pi/runs", None)  # the didOpen was handled before this answer
    err = capfd.readouterr().err
    assert "ERROR" not in err and "Traceback" not in err and "NoEventLoopError" not in err, err
