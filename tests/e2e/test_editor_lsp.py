"""The LSP front as the agent's editor (issue 38), through pytest-lsp on real pi with the scripted
model: a read of a document the client opened with unsaved text answers that text, a write to it
goes through `workspace/applyEdit` (the whole document replaced), a refused edit fails the tool
with the client's reason, and a client that applies no edits writes the disk as before. Judged
from the disk, from the edits the client was sent and from what the model was sent."""

from __future__ import annotations

import difflib
import json
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from lsprotocol.converters import get_converter
from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.env import ROOT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, make_client, scripted_run

pytestmark = [requires_pi, pytest.mark.realpi]


class Edits:
    """The client's side of workspace/applyEdit: every edit it got, and how it answers."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answer: dict[str, Any] = {"applied": True}


EDITS = Edits()


def _client() -> Callable[[], LanguageClient]:
    def make() -> LanguageClient:
        client = make_client()

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def on_apply(ls: LanguageClient, params: Any) -> Any:
            EDITS.received.append(params if isinstance(params, dict) else get_converter().unstructure(params))
            return EDITS.answer

        return client

    return make


async def _start(client: LanguageClient, pi_agent_dir: Path, *, apply_edit: bool) -> LanguageClient:
    EDITS.__init__()  # type: ignore[misc]
    capabilities = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(apply_edit=apply_edit)
    )
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            initialization_options={"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False},
            root_uri=ROOT.as_uri(),
        )
    )
    sync = result.capabilities.text_document_sync
    assert isinstance(sync, types.TextDocumentSyncOptions) and sync.open_close is True
    return client


@pytest_lsp.fixture(config=bridge_config(client_factory=_client()))
async def editor(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _start(lsp_client, pi_agent_dir, apply_edit=True)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config(client_factory=_client()))
async def no_edits(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _start(lsp_client, pi_agent_dir, apply_edit=False)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def _open(client: LanguageClient, path: Path, text: str) -> None:
    """didOpen, then a didChange: the buffer now differs from the disk (unsaved)."""
    uri = path.as_uri()
    item = types.TextDocumentItem(uri=uri, language_id="plaintext", version=1, text=path.read_text())
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
    change = types.TextDocumentContentChangeWholeDocument(text=text)
    identifier = types.VersionedTextDocumentIdentifier(uri=uri, version=2)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(text_document=identifier, content_changes=[change])
    )


def _script(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps([[name, arguments] for name, arguments in calls])


def _sent(model: ScriptedModelServer, tag: str) -> str:
    return "\n".join(
        json.dumps(r["body"]) for r in model.requests if r["body"] and tag in json.dumps(r["body"])
    )


async def test_a_read_of_an_open_document_answers_its_unsaved_text(
    editor: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("saved-4a7 on disk\n")
    _open(editor, notes, "unsaved-4a7 in the buffer\n")
    script = _script(("read", {"path": "notes.txt"}), ("read", {"path": "notes.txt", "offset": 1}))
    result, _ = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    sent = _sent(scripted_model, "unsaved-4a7")
    assert "unsaved-4a7 in the buffer" in sent and "saved-4a7 on disk" not in sent


async def test_a_write_to_an_open_document_goes_through_apply_edit(
    editor: LanguageClient, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("line one\nline two\n")
    _open(editor, notes, "line one\nline two\nunsaved line\n")
    script = _script(("write", {"path": "notes.txt", "content": "agent-5d2\n"}))
    result, messages = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    assert contents_of(messages, "tool.failed") == []
    (edit,) = EDITS.received
    (change,) = edit["edit"]["documentChanges"]
    assert change["textDocument"] == {"uri": notes.as_uri(), "version": 2}
    (replace,) = change["edits"]
    assert replace["newText"] == "agent-5d2\n"
    assert replace["range"] == {"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}}
    assert notes.read_text() == "line one\nline two\n"


async def test_a_refused_edit_fails_the_tool_with_the_reason(editor: LanguageClient, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    _open(editor, notes, "kept, and typed\n")
    EDITS.answer = {"applied": False, "failureReason": "the user said no-8e1"}
    script = _script(("write", {"path": "notes.txt", "content": "lost?\n"}))
    result, messages = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    (failed,) = contents_of(messages, "tool.failed")
    assert "did not apply the write" in failed["error"] and "no-8e1" in failed["error"]
    assert len(EDITS.received) == 1 and notes.read_text() == "kept\n"


async def test_a_write_to_a_document_that_is_not_open_lands_on_disk(
    editor: LanguageClient, tmp_path: Path
) -> None:
    script = _script(("write", {"path": "closed.txt", "content": "on-disk-1b9\n"}))
    result, _ = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    assert EDITS.received == [] and (tmp_path / "closed.txt").read_text() == "on-disk-1b9\n"


async def test_a_client_that_applies_no_edits_writes_the_disk_as_before(
    no_edits: LanguageClient, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("before\n")
    _open(no_edits, notes, "before, and typed\n")
    script = _script(("write", {"path": "notes.txt", "content": "after-2f6\n"}))
    result, _ = await scripted_run(no_edits, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    assert EDITS.received == [] and notes.read_text() == "after-2f6\n"


def _added_removed(diff: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The lines a diff adds and removes, as a review counts them (+N -M)."""
    old, new = diff["oldText"].splitlines(), diff["newText"].splitlines()
    changes = [line for line in difflib.ndiff(old, new) if line[:2] in ("+ ", "- ")]
    return [line[2:] for line in changes if line[0] == "+"], [line[2:] for line in changes if line[0] == "-"]


async def test_the_diff_of_an_edit_or_write_to_a_dirty_buffer_is_the_agent_s_change(
    editor: LanguageClient, tmp_path: Path
) -> None:
    """The diff is of the text the editor held before and after, not of the disk (unchanged)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("line one\nline two\n")
    _open(editor, notes, "line one\nline two\nunsaved 3c8\n")
    edits = {"path": "notes.txt", "edits": [{"oldText": "unsaved 3c8", "newText": "edited 3c8"}]}
    script = _script(("edit", edits))
    result, messages = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed" and contents_of(messages, "tool.failed") == []
    (edited,) = (m["diff"] for m in contents_of(messages, "tool.completed") if "diff" in m)
    assert edited["oldText"] == "line one\nline two\nunsaved 3c8\n"
    assert edited["newText"] == "line one\nline two\nedited 3c8\n"
    assert _added_removed(edited) == (["edited 3c8"], ["unsaved 3c8"]) and edited["line"] == 3
    assert EDITS.received[0]["edit"]["documentChanges"][0]["edits"][0]["newText"] == edited["newText"]
    # The buffer now holds the edit (as the client applied it): a write to it replaces that text.
    uri = notes.as_uri()
    change = types.TextDocumentContentChangeWholeDocument(text=edited["newText"])
    editor.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3), content_changes=[change]
        )
    )
    script = _script(("write", {"path": "notes.txt", "content": "line one\nwritten 3c8\n"}))
    result, messages = await scripted_run(editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed" and contents_of(messages, "tool.failed") == []
    (written,) = (m["diff"] for m in contents_of(messages, "tool.completed") if "diff" in m)
    assert written["oldText"] == "line one\nline two\nedited 3c8\n"
    assert written["newText"] == "line one\nwritten 3c8\n"
    assert _added_removed(written) == (["written 3c8"], ["line two", "edited 3c8"])
    assert notes.read_text() == "line one\nline two\n", "the disk never changed"


#: The log of the bridge `logged_editor` runs (its errors would go nowhere the client sees).
BRIDGE_LOG = Path(tempfile.mkdtemp(prefix="editor-lsp-log-")) / "bridge.log"


@pytest_lsp.fixture(config=bridge_config({"PI_BRIDGE_LOG_FILE": str(BRIDGE_LOG)}, client_factory=_client()))
async def logged_editor(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    yield await _start(lsp_client, pi_agent_dir, apply_edit=True)
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_change_to_a_document_never_opened_is_ignored_and_the_disk_is_read(
    logged_editor: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    """A didChange with no didOpen before it (a client that lost track across a restart) has no
    text to apply to: it is set aside with a warning, not an error, and the agent reads the disk."""
    notes = tmp_path / "notes.txt"
    notes.write_text("saved-9c1 on disk\n")
    change = types.TextDocumentContentChangeWholeDocument(text="unsaved-9c1 never opened\n")
    identifier = types.VersionedTextDocumentIdentifier(uri=notes.as_uri(), version=2)
    logged_editor.text_document_did_change(
        types.DidChangeTextDocumentParams(text_document=identifier, content_changes=[change])
    )
    script = _script(("read", {"path": "notes.txt"}))
    result, _ = await scripted_run(logged_editor, tmp_path, "script", prompt=script)
    assert result["status"] == "completed"
    sent = _sent(scripted_model, "9c1")
    assert "saved-9c1 on disk" in sent and "unsaved-9c1" not in sent
    log = BRIDGE_LOG.read_text()
    assert "which was never opened: ignored" in log and "Traceback" not in log, log[-2000:]
