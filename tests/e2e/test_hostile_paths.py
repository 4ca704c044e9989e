"""A path the model names is hostile input: a FIFO, the bridge's own stdio, a NUL byte.

The real pi runs the scripted model's `writepath`/`editpath`, which call pi's write or edit on the
path the prompt names and then answer slowly, so the run is still live afterwards. For each path,
on both engines: the bridge survives, another conversation's run completes meanwhile, and a
cancel of the hostile run ends it with its terminal message and no process left.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from bridge.scripted_model import TEXT_REPLY
from tests.conftest import requires_pi
from tests.support.leaks import assert_no_run_processes, run_processes_alive
from tests.support.lsp import answer_or_error, bridge_config, initialize, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


@pytest_lsp.fixture(config=bridge_config(), params=["rpc", "json"])
async def bridge(
    lsp_client: LanguageClient, pi_agent_dir: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LanguageClient]:
    """The real pi against the scripted model, on the rpc engine and on the json engine."""
    await initialize(
        lsp_client,
        {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "engine": request.param, "warmPool": False},
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def survives(client: LanguageClient, tmp_path: Path, model: str, path: str) -> list[dict[str, Any]]:
    """Run `model` on `path`; once pi is in the tool, another run must complete and a cancel of
    this one must end it. Returns the hostile run's messages."""
    messages = messages_of(client)
    run_id = f"hostile-{os.urandom(4).hex()}"
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    _, task = start_request(
        client,
        "pi/run",
        {"runId": run_id, "prompt": path, "provider": "fake", "model": model, "cwd": str(workspace)},
    )
    await messages.wait_type(run_id, "tool.call")
    if model == "writepath":  # the write returns: the run goes on to its slow answer
        await messages.wait_until(
            lambda: any(m["type"] == "assistant" for m in after_tool(messages.by_run[run_id]))
        )
    other = tmp_path / "other"
    other.mkdir(exist_ok=True)
    meanwhile = await request(
        client, "pi/run", {"prompt": "hi", "provider": "fake", "model": "text", "cwd": str(other)}
    )
    assert meanwhile["status"] == "completed" and meanwhile["text"] == TEXT_REPLY, meanwhile
    cancelled = await request(client, "pi/cancel", {"runId": run_id})
    assert cancelled["found"] is True, cancelled
    receipt = cancelled["shutdown"]
    assert receipt["survivors"] == [] and run_processes_alive(receipt["pids"]) == [], receipt
    _, error = await answer_or_error(task)
    assert error is not None and error.data["status"] == "cancelled", error
    stream = messages.by_run[run_id]
    assert_stream_invariants(stream)
    assert stream[-1]["type"] == "terminal.cancelled"
    runs = await request(client, "pi/runs", None)
    assert run_id not in [entry["runId"] for entry in runs["runs"]]
    return stream


def after_tool(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the run's first tool call was closed."""
    for index, message in enumerate(stream):
        if message["type"] in ("tool.completed", "tool.failed"):
            return stream[index + 1 :]
    return []


def tool_close(stream: list[dict[str, Any]]) -> dict[str, Any]:
    (closed,) = [m for m in stream if m["type"] in ("tool.completed", "tool.failed")]
    return closed


async def test_a_nul_byte_in_a_write_path(bridge: LanguageClient, tmp_path: Path) -> None:
    stream = await survives(bridge, tmp_path, "writepath", "bad\u0000name.txt")
    closed = tool_close(stream)
    assert closed["type"] == "tool.failed", closed  # pi refuses the path itself


@pytest.mark.parametrize("device", ["/dev/stdin", "/dev/stdout"])
async def test_a_write_to_the_bridge_s_own_stdio_is_not_read(
    bridge: LanguageClient, tmp_path: Path, device: str
) -> None:
    """/dev/stdin and /dev/stdout resolve, in the bridge, to its own pipes to the client."""
    stream = await survives(bridge, tmp_path, "writepath", device)
    closed = tool_close(stream)
    if closed["type"] == "tool.completed":
        assert closed["content"]["diff"] == {"path": device}, closed  # no texts: not a regular file


async def test_an_edit_of_a_fifo_is_not_read(
    bridge: LanguageClient, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On the rpc engine pi's edit hands its read to the bridge, which never opens a FIFO for
    reading: the tool fails at once. On the json engine (no channel to the bridge) pi's own read
    blocks on the FIFO: the run is live in its tool, and the cancel ends it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.mkfifo(workspace / "pipe")
    stream = await survives(bridge, tmp_path, "editpath", "pipe")
    closed = tool_close(stream)
    if request.node.callspec.params["bridge"] == "rpc":
        assert closed["type"] == "tool.failed" and "is not a regular file" in closed["content"]["error"], (
            closed
        )
    else:
        assert closed["type"] == "tool.failed" and closed["content"].get("cancelled") is True, closed
