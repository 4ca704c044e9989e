"""pi/permissions and pi/setPermissions over stdio with pytest-lsp: a round trip into the
bridge's own state dir, -32602 naming the field, and a tampered rule file as a clear error."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pygls.client import JsonRPCClient
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV, RuleStore
from tests.support.env import BRIDGE, fake_pi_command
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import BridgeServerConfig, initialize, make_client, request
from tests.unit.policy.test_rule_store import WORKSPACE_RULE as RULE


class _OwnStateConfig(BridgeServerConfig):
    """A bridge config that gives each bridge a fresh state dir of its own when it starts."""

    async def start(self, devtools: str | None = None) -> JsonRPCClient:
        _STATE.append(Path(tempfile.mkdtemp(prefix="pi-bridge-state-")))
        self.extra_env = {STATE_DIR_ENV: str(_STATE[-1] / "pi-bridge")}
        return await super().start(devtools)


# The state dir of the bridge started last (its config runs before any fixture of the test's).
_STATE: list[Path] = []
_CONFIG = _OwnStateConfig(server_command=BRIDGE, client_factory=make_client)


@pytest.fixture(autouse=True)
def state(bridge: LanguageClient) -> Iterator[Path]:
    """The state dir of this test's bridge; removed at the end (every test here has one)."""
    root = _STATE[-1]
    yield root / "pi-bridge"
    shutil.rmtree(root, ignore_errors=True)


@pytest_lsp.fixture(config=_CONFIG)
async def bridge(lsp_client: LanguageClient) -> AsyncIterator[LanguageClient]:
    lsp_client.init_result = await initialize(lsp_client, {"piCommand": fake_pi_command()})  # type: ignore[attr-defined]
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "workspace" / "src").mkdir(parents=True)
    return tmp_path / "workspace"


def listing(workspace: Path) -> list[Any]:
    return [entry.name for entry in sorted(workspace.rglob("*"))]


async def test_set_then_list_round_trips_into_the_state_dir(
    bridge: LanguageClient, state: Path, workspace: Path
) -> None:
    before = listing(workspace)
    session_rule = {**RULE, "id": "s", "scope": "session", "sessionId": "conv-1", "match": {"path": "src/**"}}
    answer = await request(
        bridge, "pi/setPermissions", {"cwd": str(workspace), "rules": [RULE, session_rule]}
    )
    assert answer == {"cwd": str(workspace), "rules": [RULE, session_rule]}
    assert await request(bridge, "pi/permissions", {"cwd": str(workspace)}) == answer
    (stored,) = (state / "permissions").iterdir()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["rules"] == [RULE]  # session rules stay in memory
    assert listing(workspace) == before
    other = workspace.parent / "other"
    other.mkdir()
    assert await request(bridge, "pi/permissions", {"cwd": str(other)}) == {"cwd": str(other), "rules": []}


async def test_the_methods_are_listed_in_initialize(bridge: LanguageClient) -> None:
    methods = bridge.init_result.capabilities.experimental["piBridge"]["methods"]  # type: ignore[attr-defined]
    assert {"pi/permissions", "pi/setPermissions"} <= set(methods)


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("pi/permissions", {}, "cwd"),
        ("pi/permissions", {"cwd": "relative/dir"}, "cwd"),
        ("pi/setPermissions", {"cwd": "/tmp"}, "rules"),
        ("pi/setPermissions", {"cwd": "/tmp", "rules": [{**RULE, "decision": "maybe"}]}, "rules.0.decision"),
        ("pi/setPermissions", {"cwd": "/tmp", "rules": [{**RULE, "match": {}}]}, "rules.0.match"),
        ("pi/setPermissions", {"cwd": "/tmp", "rules": [{**RULE, "scope": "session"}]}, "rules.0"),
        ("pi/setPermissions", {"cwd": "/tmp", "rules": [{**RULE, "why": "x"}]}, "rules.0.why"),
        ("pi/setPermissions", {"cwd": "/tmp", "rules": [RULE, RULE]}, "rules"),
    ],
)
async def test_bad_params_are_invalid_params_naming_the_field(
    bridge: LanguageClient, state: Path, method: str, params: dict[str, Any], field: str
) -> None:
    with pytest.raises(JsonRpcInvalidParams) as caught:
        await request(bridge, method, params)
    assert caught.value.code == -32602
    assert f"{field}:" in caught.value.message, caught.value.message
    assert not (state / "permissions").exists() or not any((state / "permissions").iterdir())


@pytest.mark.parametrize("tamper", ["bad json", "wrong schema", "group writable"])
async def test_a_tampered_state_file_is_a_clear_error(
    bridge: LanguageClient, state: Path, workspace: Path, tamper: str
) -> None:
    await request(bridge, "pi/setPermissions", {"cwd": str(workspace), "rules": [RULE]})
    path = RuleStore(state).path_for(str(workspace))
    if tamper == "bad json":
        path.write_text('{"version": 1, "rules": [')
    elif tamper == "wrong schema":
        path.write_text(
            json.dumps({"version": 1, "cwd": os.path.realpath(workspace), "rules": [{"id": "x"}]})
        )
    else:
        path.chmod(0o666)
    with pytest.raises(JsonRpcException) as caught:
        await request(bridge, "pi/permissions", {"cwd": str(workspace)})
    assert caught.value.code == -32000
    assert str(path) in caught.value.message
    problem = {
        "bad json": "is not valid JSON",
        "wrong schema": "rule schema",
        "group writable": "writable by group",
    }
    assert problem[tamper] in caught.value.message
    # replacing the rules repairs the file
    assert (await request(bridge, "pi/setPermissions", {"cwd": str(workspace), "rules": []}))["rules"] == []
    assert (await request(bridge, "pi/permissions", {"cwd": str(workspace)}))["rules"] == []
