"""`diff` on tool.completed of pi's edit and write tools, with the real pi and the scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_lsp import LanguageClient

from bridge.contract import pi_message_adapter
from bridge.scripted_model import (
    EDIT_FILE,
    EDIT_NEW,
    EDIT_OLD,
    EDIT_ORIGINAL,
    WRITE_CONTENT,
    WRITE_FILE,
)
from tests.conftest import requires_pi
from tests.support.lsp import messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]


async def completed_tool(client: LanguageClient, model: str, cwd: Path) -> dict[str, Any]:
    """The content of the run's single tool.completed (the run must complete)."""
    result = await request(
        client, "pi/run", {"prompt": "Change the file", "provider": "fake", "model": model, "cwd": str(cwd)}
    )
    assert result["status"] == "completed", result
    stream = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(stream)
    for message in stream:
        pi_message_adapter().validate_python(message)
    (completed,) = [m["content"] for m in stream if m["type"] == "tool.completed"]
    return completed


async def test_an_edit_carries_the_file_before_and_after(real_bridge: LanguageClient, tmp_path: Path) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL)
    completed = await completed_tool(real_bridge, "edit", tmp_path)
    edited = EDIT_ORIGINAL.replace(EDIT_OLD, EDIT_NEW)
    assert target.read_text() == edited
    assert completed["name"] == "edit"
    assert completed["diff"] == {"path": str(target), "oldText": EDIT_ORIGINAL, "newText": edited, "line": 2}


async def test_a_new_file_has_null_old_text(real_bridge: LanguageClient, tmp_path: Path) -> None:
    completed = await completed_tool(real_bridge, "write", tmp_path)
    target = tmp_path / WRITE_FILE
    assert target.read_text() == WRITE_CONTENT
    assert completed["diff"] == {"path": str(target), "oldText": None, "newText": WRITE_CONTENT, "line": 1}


async def test_overwriting_a_file_carries_its_old_text(real_bridge: LanguageClient, tmp_path: Path) -> None:
    target = tmp_path / WRITE_FILE
    target.parent.mkdir()
    target.write_text("first line\nold second line\n")
    completed = await completed_tool(real_bridge, "write", tmp_path)
    assert completed["diff"] == {
        "path": str(target),
        "oldText": "first line\nold second line\n",
        "newText": WRITE_CONTENT,
        "line": 2,
    }


async def test_a_file_over_1_mib_carries_only_path_and_line(
    real_bridge: LanguageClient, tmp_path: Path
) -> None:
    target = tmp_path / EDIT_FILE
    target.write_text(EDIT_ORIGINAL + "filler\n" * 200_000)
    completed = await completed_tool(real_bridge, "edit", tmp_path)
    assert completed["diff"] == {"path": str(target), "line": 2}


async def test_a_bash_tool_has_no_diff(real_bridge: LanguageClient, tmp_path: Path) -> None:
    completed = await completed_tool(real_bridge, "tool", tmp_path)
    assert "diff" not in completed
