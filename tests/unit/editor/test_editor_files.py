"""The editor's hands in runs/ (bridge/editor/editor_files.py, file_ops.py, editor_commands.py) with
a fake editor: the path policy judges before the editor is asked, what the editor does not take
goes to the disk, its refusal is the tool's error; commands run in its terminals, polled until
they end, killed and released on a cancel; and the bash marker read from pi's request."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
import orjson
from pygls.workspace import TextDocument

from bridge.agents.pi.tool_checks import command_op, fs_answer_line, is_command_request
from bridge.agents.values import FileOp, FileOpResult, RunOptions
from bridge.contract import RunParams
from bridge.editor.editor_commands import EditorCommands
from bridge.editor.editor_files import NOT_THE_EDITORS, EditorAnswer, TerminalState
from bridge.engines.cancel import CancelToken
from bridge.fronts.lsp.editor import whole_document_edit
from bridge.policy.file_access import FileAccess
from bridge.policy.file_ops import file_ops
from bridge.policy.gate import unconfined_command
from bridge.runs.run import Run


class FakeEditor:
    """Holds buffers by path; runs `terminals` as states the test moves on."""

    def __init__(self, *, buffers: dict[str, str] | None = None, refuse: str | None = None) -> None:
        self.buffers = buffers or {}
        self.refuse = refuse
        self.asked: list[tuple[str, str]] = []
        self.terminals: dict[str, TerminalState] = {}
        self.exited = anyio.Event()
        self.ended: list[tuple[str, bool]] = []
        self.started: list[Sequence[str]] = []

    async def read_text(self, session_id: str, path: str) -> EditorAnswer:
        self.asked.append(("read", path))
        return EditorAnswer(taken=True, text=self.buffers[path]) if path in self.buffers else NOT_THE_EDITORS

    async def write_text(self, session_id: str, path: str, text: str) -> EditorAnswer:
        self.asked.append(("write", path))
        if self.refuse:
            return EditorAnswer(taken=True, error=self.refuse)
        self.buffers[path] = text
        return EditorAnswer(taken=True)

    def takes(self, path: str, *, write: bool) -> bool:
        return write or path in self.buffers

    def runs_commands(self) -> bool:
        return True

    async def start_command(
        self, session_id: str, argv: Sequence[str], cwd: str, tool_call_id: str
    ) -> EditorAnswer:
        self.started.append(argv)
        self.terminals["t1"] = TerminalState(output="partial")
        return EditorAnswer(taken=True, text="t1")

    async def wait_command(self, session_id: str, terminal_id: str) -> None:
        await self.exited.wait()

    async def command_state(self, session_id: str, terminal_id: str) -> TerminalState:
        return self.terminals[terminal_id]

    async def end_command(self, session_id: str, terminal_id: str, *, kill: bool) -> None:
        self.ended.append((terminal_id, kill))


def _run(cwd: Path) -> Run:
    run = Run(
        "r1", RunParams(prompt="x", cwd=str(cwd)), RunOptions(prompt="x", cwd=str(cwd)), lambda batch: None
    )
    run.session_id = "s1"
    return run


async def test_a_read_answers_the_editor_s_text_and_a_write_lands_only_there(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("disk\n")
    editor = FakeEditor(buffers={str(notes): "buffer\n"})
    do = file_ops(_run(tmp_path), lambda: FileAccess.of(str(tmp_path), "off", []), editor)
    assert await do(FileOp("c1", "read", "read", str(notes))) == FileOpResult(data=b"buffer\n")
    wrote = await do(FileOp("c2", "write", "write", str(notes), data=b"agent\n"))
    assert wrote == FileOpResult(kind="file", data=b"buffer\n")  # the diff's old text: the buffer's
    assert editor.buffers[str(notes)] == "agent\n" and notes.read_text() == "disk\n"


async def test_the_policy_judges_first_and_what_the_editor_does_not_take_is_the_disk_s(
    tmp_path: Path,
) -> None:
    editor = FakeEditor()
    do = file_ops(_run(tmp_path), lambda: FileAccess.of(str(tmp_path), "read-only", []), editor)
    refused = await do(FileOp("c1", "write", "write", str(tmp_path / "x.txt"), data=b"x"))
    assert refused.error is not None and "read-only" in refused.error and editor.asked == []
    kept_out = await do(FileOp("c2", "read", "read", "/proc/self/environ"))
    assert kept_out.error is not None and "hidden" in kept_out.error and editor.asked == []
    (tmp_path / "plain.txt").write_text("on disk\n")
    assert await do(FileOp("c3", "read", "read", str(tmp_path / "plain.txt"))) == FileOpResult(
        data=b"on disk\n"
    )
    assert editor.asked == [], "a file the editor does not hold is read from the disk, unasked"


async def test_an_editor_s_refusal_is_the_tool_s_error_and_the_disk_is_untouched(tmp_path: Path) -> None:
    editor = FakeEditor(refuse="the editor said no")
    do = file_ops(_run(tmp_path), lambda: FileAccess.of(str(tmp_path), "off", []), editor)
    answer = await do(FileOp("c1", "write", "write", str(tmp_path / "new.txt"), data=b"x"))
    assert answer.error == "the editor said no" and not (tmp_path / "new.txt").exists()


async def test_a_command_is_polled_until_it_ends_then_released() -> None:
    editor, cancel = FakeEditor(), CancelToken()
    commands = EditorCommands(editor, cancel, lambda command: ("bash", "-c", command))
    started = await commands.do("s1", FileOp("c1", "bash", "exec", "/w", command="echo hi"))
    assert started == FileOpResult(terminal_id="t1") and editor.started == [("bash", "-c", "echo hi")]
    running = await commands.do("s1", FileOp("c1", "bash", "poll", "", terminal_id="t1"))
    assert running == FileOpResult(terminal_id="t1", output="partial")
    editor.terminals["t1"] = TerminalState(output="all", exited=True, exit_code=3)
    editor.exited.set()
    done = await commands.do("s1", FileOp("c1", "bash", "poll", "", terminal_id="t1"))
    assert done == FileOpResult(terminal_id="t1", output="all", done=True, exit_code=3)
    assert editor.ended == [("t1", False)]
    other = await commands.do("s1", FileOp("c1", "bash", "poll", "", terminal_id="t1"))
    assert other.error is not None and "no terminal" in other.error


async def test_a_cancel_kills_a_polled_command_at_once() -> None:
    editor, cancel = FakeEditor(), CancelToken()
    commands = EditorCommands(editor, cancel, lambda command: ("bash", "-c", command))
    await commands.do("s1", FileOp("c1", "bash", "exec", "/w", command="sleep 300"))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            results: list[FileOpResult] = []

            async def poll() -> None:
                results.append(await commands.do("s1", FileOp("c1", "bash", "poll", "", terminal_id="t1")))

            group.start_soon(poll)
            cancel.cancel()
    assert results[0].done and results[0].error is not None and editor.ended == [("t1", True)]


def test_a_sandbox_that_cannot_be_read_runs_nothing() -> None:
    async def go() -> FileOpResult:
        commands = EditorCommands(FakeEditor(), CancelToken(), lambda command: "sandbox: nothing runs")
        return await commands.do("s1", FileOp("c1", "bash", "exec", "/w", command="echo hi"))

    assert anyio.run(go) == FileOpResult(error="sandbox: nothing runs")


def test_the_bash_marker_is_read_into_command_operations() -> None:
    def request(payload: object) -> dict[str, object]:
        return {
            "method": "input",
            "title": "pi-bridge:bash",
            "id": "x",
            "placeholder": orjson.dumps(payload).decode(),
        }

    exec_request = request({"toolCallId": "c1", "op": "exec", "cwd": "/w", "command": "ls"})
    assert is_command_request(exec_request)
    assert command_op(exec_request) == FileOp("c1", "bash", "exec", "/w", command="ls")
    poll = command_op(request({"toolCallId": "c1", "op": "poll", "terminalId": "t1"}))
    assert poll == FileOp("c1", "bash", "poll", "", terminal_id="t1")
    assert command_op(request({"toolCallId": "c1", "op": "rm", "terminalId": "t1"})) is None
    assert command_op(request({"toolCallId": "c1", "op": "exec", "cwd": "/w"})) is None
    line = orjson.loads(
        fs_answer_line("r1", FileOpResult(terminal_id="t1", output="o", done=True, exit_code=0))
    )
    assert orjson.loads(line["value"]) == {"terminalId": "t1", "output": "o", "exitCode": 0, "done": True}
    assert orjson.loads(orjson.loads(fs_answer_line("r2", FileOpResult(local=True)))["value"]) == {
        "local": True
    }


def test_the_lsp_edit_replaces_the_whole_document_at_the_server_s_version() -> None:
    def end_of(text: str) -> dict[str, int]:
        edit = whole_document_edit(TextDocument("file:///w/a.txt", text, version=7), "new")
        (change,) = edit["edit"]["documentChanges"]
        assert change["textDocument"] == {"uri": "file:///w/a.txt", "version": 7}
        end: dict[str, int] = change["edits"][0]["range"]["end"]
        return end

    assert end_of("") == {"line": 0, "character": 0}
    assert end_of("one\ntwo\n") == {"line": 2, "character": 0}
    assert end_of("one\ntwo") == {"line": 1, "character": 3}
    assert end_of("emoji \U0001f600") == {"line": 0, "character": 8}  # UTF-16 units


def test_an_unsandboxed_command_in_the_editor_s_terminal_gets_none_of_the_client_s_secrets() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "OPENAI_API_KEY": "sk-" + "x" * 40,
        "MY_TOKEN": "t" * 32,
    }
    argv = unconfined_command("echo hi", environ)
    assert argv[0] == "env" and argv[-3:] == ("bash", "-c", "echo hi")
    assert "--unset=OPENAI_API_KEY" in argv and "--unset=MY_TOKEN" in argv
    assert "--unset=PATH" not in argv and "--unset=HOME" not in argv
    shown = subprocess.run(argv, env=environ, capture_output=True, text=True, check=True)
    assert shown.stdout == "hi\n"
    printed = subprocess.run(
        unconfined_command("env", environ), env=environ, capture_output=True, text=True, check=True
    ).stdout
    assert "sk-" not in printed and "MY_TOKEN" not in printed and "PATH=/usr/bin" in printed
