"""ACP auth methods through the official SDK client: initialize lists an API-key method and pi's own
login in a terminal, by hand and through the SDK alike, and `authenticate` answers both."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from acp import RequestError, spawn_agent_process
from acp.client.connection import ClientSideConnection

from bridge.policy.rule_store import STATE_DIR_ENV
from tests.support.acp import AcpRecorder
from tests.support.env import BRIDGE, WAIT, bridge_env, requires_pi

pytestmark = [requires_pi]

KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")


@contextlib.asynccontextmanager
async def _client(
    cwd: Path, keys: dict[str, str], extra: dict[str, str] | None = None
) -> AsyncIterator[ClientSideConnection]:
    """A `pi-bridge acp` not yet initialized, whose environment has exactly `keys` of the API keys."""
    env = bridge_env({STATE_DIR_ENV: tempfile.mkdtemp(prefix="pi-bridge-auth-state-"), **(extra or {})})
    env = {name: value for name, value in env.items() if name not in KEYS} | keys
    async with spawn_agent_process(
        cast(Any, AcpRecorder()),
        BRIDGE[0],
        *BRIDGE[1:],
        "acp",
        env=env,
        cwd=cwd,
        transport_kwargs={"stderr": subprocess.DEVNULL},
        use_unstable_protocol=True,
    ) as (conn, _):
        yield conn


def _methods(answer: Any) -> dict[str, dict[str, Any]]:
    dumped = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {method["id"]: method for method in dumped.get("authMethods", [])}


async def test_acp_initialize_lists_an_api_key_and_a_login_method_and_authenticate_answers(
    tmp_path: Path,
) -> None:
    async with _client(tmp_path, {}) as conn:
        by_hand = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)  # the first frame
        by_sdk = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        methods = _methods(by_hand)
        assert methods == _methods(by_sdk), "the hand-written answer and the SDK's agree"
        assert methods["pi-api-key"]["type"] == "env_var"
        assert {var["name"] for var in methods["pi-api-key"]["vars"]} == set(KEYS)
        assert methods["pi-login"]["type"] == "terminal" and methods["pi-login"]["args"] == ["--login"]
        with pytest.raises(RequestError) as no_key:
            await asyncio.wait_for(conn.authenticate(method_id="pi-api-key"), WAIT)
        assert "no API key" in str(no_key.value) and "OPENAI_API_KEY" in str(no_key.value)
        with pytest.raises(RequestError) as unknown:
            await asyncio.wait_for(conn.authenticate(method_id="oauth"), WAIT)
        assert unknown.value.code == -32602
    async with _client(tmp_path, {"OPENAI_API_KEY": "sk-test-not-a-real-key"}) as conn:
        await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        assert await asyncio.wait_for(conn.authenticate(method_id="pi-api-key"), WAIT) is not None


async def test_acp_pi_login_is_answered_only_once_pi_holds_a_stored_login(tmp_path: Path) -> None:
    """`authenticate` with pi's login checks pi's own auth.json: none, or an empty one (what `pi
    --version` leaves), is an error telling what to run; a stored login is accepted, and its
    secret appears in no answer."""
    agent_dir, home = tmp_path / "agent", tmp_path / "home"
    agent_dir.mkdir()
    home.mkdir()
    where = {"PI_CODING_AGENT_DIR": str(agent_dir), "HOME": str(home)}
    secret = "sk-ant-oat-" + "7" * 24
    async with _client(tmp_path, {}, where) as conn:
        await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
        for stored in (None, "{}"):
            if stored is not None:
                (agent_dir / "auth.json").write_text(stored)
            with pytest.raises(RequestError) as none:
                await asyncio.wait_for(conn.authenticate(method_id="pi-login"), WAIT)
            assert "no login" in str(none.value) and "--login" in str(none.value)
        (agent_dir / "auth.json").write_text(json.dumps({"anthropic": {"type": "oauth", "access": secret}}))
        answer = await asyncio.wait_for(conn.authenticate(method_id="pi-login"), WAIT)
        assert answer is not None and secret not in answer.model_dump_json()


def test_acp_login_runs_pi_s_own_login_with_the_provider(tmp_path: Path) -> None:
    """`pi-bridge acp --login` (the terminal method's command) runs `pi auth login <provider>`."""
    fake_pi = tmp_path / "fake-pi"
    record = tmp_path / "argv"
    fake_pi.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\nexit 3\n')
    fake_pi.chmod(0o755)
    argv = [*BRIDGE, "--pi-command", str(fake_pi), "acp", "--login"]
    env = bridge_env()
    done = subprocess.run(argv, input=b"openai\n", env=env, cwd=tmp_path, timeout=WAIT, check=False)
    assert done.returncode == 3, "pi's exit status is the command's"
    assert record.read_text().split() == ["auth", "login", "openai"]
