"""Secrets pass through to the agent but never into logs, messages or errors; no network listener.

A fake API key reaches the agent two ways (initializationOptions.env, and the bridge's own
environment); tests/fakes/fake_pi.py (scenario `env`) reports each one's presence, length and SHA-256 (never the
value). The bridge runs with DEBUG logging to a --log-file and its stderr captured; neither, nor
any frame it wrote, may hold a secret. piCommand comes only from the server's configuration.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.acp import RawAcp
from tests.support.env import ROOT, WAIT, fake_pi_command, requires_pi
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

SECRET_OPTIONS = "sk-test-SECRET-0ptions-9f3a7c1e5b2d4a6f8e0c"
SECRET_PROCESS = "sk-ant-test-SECRET-pr0cess-1a2b3c4d5e6f7a8b"
SECRETS = (SECRET_OPTIONS, SECRET_PROCESS)


def described(value: str) -> str:
    return f"present len={len(value)} sha256={hashlib.sha256(value.encode()).hexdigest()}"


@pytest.fixture
def secret_bridge(tmp_path: Path) -> Iterator[tuple[RawBridge, Path, Path]]:
    log_file = tmp_path / "bridge.log"
    stderr_file = tmp_path / "bridge.stderr"
    bridge = RawBridge(
        ["--log-level", "DEBUG"],
        {"PI_BRIDGE_LOG_LEVEL": "DEBUG", "ANTHROPIC_API_KEY": SECRET_PROCESS},
        log_file=log_file,
        stderr_file=stderr_file,
    )
    try:
        bridge.initialize(
            {
                "piCommand": fake_pi_command(),
                "env": {"OPENAI_API_KEY": SECRET_OPTIONS},
                "retry": {"maxAttempts": "not a number"},  # a bad option: its warning must not leak
            }
        )
        yield bridge, log_file, stderr_file
    finally:
        bridge.close()


def test_api_keys_reach_the_agent_but_no_log_message_or_error(
    secret_bridge: tuple[RawBridge, Path, Path],
) -> None:
    bridge, log_file, stderr_file = secret_bridge
    result = bridge.call(
        "pi/run", {"prompt": "OPENAI_API_KEY ANTHROPIC_API_KEY NOT_SET_ANYWHERE", "model": "env"}
    )["result"]
    assert result["status"] == "completed", result
    assert result["text"].splitlines() == [
        f"OPENAI_API_KEY={described(SECRET_OPTIONS)}",
        f"ANTHROPIC_API_KEY={described(SECRET_PROCESS)}",
        "NOT_SET_ANYWHERE=absent",
    ]
    assert_stream_invariants(bridge.run_messages(result["runId"]))

    failed = bridge.call("pi/run", {"prompt": "OPENAI_API_KEY ANTHROPIC_API_KEY", "model": "stderr-env"})[
        "result"
    ]
    assert failed["status"] == "failed" and "OPENAI_API_KEY" in failed["error"]["stderr"]
    errors = [
        bridge.call("pi/run", {"prompt": "x", "model": "env", "piCommand": ["/bin/sh"]}),
        bridge.call("pi/run", {"prompt": "x", "cwd": "/no/such/dir"}),
        bridge.call("pi/cancel", {"runId": "unknown"}),
        bridge.call("pi/nope", {}),
    ]
    assert [e.get("error", {}).get("code") for e in errors] == [-32602, -32602, None, -32601]
    assert bridge.shutdown() == 0

    wire = json.dumps(bridge.messages)
    logs = log_file.read_text(errors="replace")
    stderr = stderr_file.read_text(errors="replace")
    assert "DEBUG" in logs, "the bridge must really have logged at DEBUG"
    assert "initializationOptions.retry" in logs, "the bad option's warning was logged"
    for secret in SECRETS:
        for where, text in (("the wire", wire), ("the log file", logs), ("stderr", stderr)):
            assert secret not in text, f"a secret leaked into {where}"
            assert secret[-12:] not in text, f"part of a secret leaked into {where}"


def test_pi_command_comes_only_from_server_configuration(secret_bridge: tuple[RawBridge, Path, Path]) -> None:
    bridge, _, _ = secret_bridge
    for key in ("piCommand", "pi_command", "command", "env"):
        answer = bridge.call("pi/run", {"prompt": "x", "model": "env", key: ["/bin/sh", "-c", "echo pwned"]})
        assert answer["error"]["code"] == -32602 and key in answer["error"]["message"], answer


def _inet_inodes() -> dict[str, set[str]]:
    """Socket inodes of every TCP/UDP socket of the host, by state: LISTEN (tcp 0A) or other."""
    found: dict[str, set[str]] = {"listen": set(), "other": set()}
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            state, inode = fields[3], fields[9]
            found["listen" if table.startswith("tcp") and state == "0A" else "other"].add(inode)
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def test_the_bridge_listens_on_no_network_port(secret_bridge: tuple[RawBridge, Path, Path]) -> None:
    bridge, _, _ = secret_bridge
    run = bridge.request("pi/run", {"prompt": "OPENAI_API_KEY", "model": "env"})
    bridge.response(run)
    owned = _socket_inodes(bridge.pid)
    tables = _inet_inodes()
    assert not owned & tables["listen"], "the bridge owns a listening TCP socket"
    assert not owned & tables["other"], "the bridge owns a TCP/UDP socket"
    assert [c for c in psutil.Process(bridge.pid).net_connections(kind="inet")] == []


# --------------------------------------------------------------------------- an agent whose errors carry a key

FAKE_RPC_PI = [sys.executable, str(ROOT / "tests" / "fakes" / "fake_rpc_pi.py")]


def assert_no_secret(**texts: str) -> None:
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text and secret[-12:] not in text, f"a secret leaked into {where}"


def wait_for_line(path: Path, needle: str, timeout: float = WAIT) -> str:
    """The log file's text once it holds `needle` (polls the file: no event tells it was written)."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return text
        assert time.monotonic() < deadline, f"{needle!r} was never logged"
        time.sleep(0.05)


def test_a_live_pi_whose_error_output_carries_keys_leaks_them_nowhere(tmp_path: Path) -> None:
    """A live pi fails to start printing the keys it was given (fake_rpc_pi.py, FAKE_RPC_PI_LEAK):
    the run's answer, its retry note, the bridge's DEBUG log and stderr hold neither key (was: the
    retry note carried the error's stderr tail, and the log line of the failed pre-spawn too)."""
    log_file, stderr_file = tmp_path / "bridge.log", tmp_path / "bridge.stderr"
    bridge = RawBridge(
        ["--log-level", "DEBUG"],
        {"PI_BRIDGE_LOG_LEVEL": "DEBUG", "ANTHROPIC_API_KEY": SECRET_PROCESS},
        log_file=log_file,
        stderr_file=stderr_file,
    )
    try:
        bridge.initialize(
            {
                "piCommand": FAKE_RPC_PI,
                "env": {"OPENAI_API_KEY": SECRET_OPTIONS, "FAKE_RPC_PI_LEAK": str(tmp_path / "starts")},
                "retry": {"maxAttempts": 2, "initialDelayMs": 0, "maxDelayMs": 0},
            }
        )
        first = bridge.call("pi/run", {"prompt": "hi"})["result"]  # on the spare, the one start that works
        assert first["status"] == "completed", first
        failed = bridge.call("pi/run", {"prompt": "hi again", "runId": "leaky"})["result"]
        assert failed["status"] == "failed" and failed["attempts"] == 2, failed
        assert "OPENAI_API_KEY=[redacted]" in failed["error"]["stderr"], "the stderr was kept, masked"
        [retrying] = [m for m in bridge.run_messages("leaky") if m["type"] == "run.retrying"]
        assert "[redacted]" in retrying["content"]["reason"], retrying
        logs = wait_for_line(log_file, "could not pre-spawn a live agent")
        assert bridge.shutdown() == 0
    finally:
        bridge.close()
    logs = log_file.read_text(errors="replace")
    assert "[redacted]" in logs, "the log line that carried the keys is there, masked"
    assert_no_secret(
        wire=json.dumps(bridge.messages), log=logs, stderr=stderr_file.read_text(errors="replace")
    )


@requires_pi
def test_acp_a_live_pi_whose_error_output_carries_keys_leaks_them_nowhere(tmp_path: Path) -> None:
    """The ACP front: session/new's error when pi cannot start (its message and `data.stderr`)
    and the log file hold no key (was: both carried pi's stderr as it was)."""
    log_file = tmp_path / "bridge.log"
    bridge = RawAcp(
        tmp_path,
        tmp_path,
        top_args=(
            "--pi-command",
            shlex.join(FAKE_RPC_PI),
            "--log-level",
            "DEBUG",
            "--log-file",
            str(log_file),
        ),
        extra_env={
            "ANTHROPIC_API_KEY": SECRET_PROCESS,
            "OPENAI_API_KEY": SECRET_OPTIONS,
            "FAKE_RPC_PI_LEAK": str(tmp_path / "starts"),
        },
    )
    try:
        bridge.request("initialize", {"protocolVersion": 1})
        opened = bridge.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})  # the spare: works
        assert "sessionId" in opened["result"], opened
        refused = bridge.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        error = refused["error"]
        assert error["code"] == -32000 and "ANTHROPIC_API_KEY=[redacted]" in error["data"]["stderr"], error
        wait_for_line(log_file, "could not pre-spawn a live agent")  # the next spare, 3 s later
    finally:
        assert bridge.close() == 0
    assert_no_secret(wire=json.dumps(bridge.frames), log=log_file.read_text(errors="replace"))
