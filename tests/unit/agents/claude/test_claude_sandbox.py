"""The bridge's sandbox for Claude Code's tool calls: what is refused, what runs confined, and the
launch that makes Claude Code ask about every call."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import orjson
import pytest

from bridge.agents.claude import ClaudeAgent
from bridge.agents.claude import sandbox as claude_sandbox
from bridge.agents.claude.live import ClaudeLive, live_flags
from bridge.agents.claude.sandbox import Sandbox, confine, read_sandbox, refusal
from bridge.agents.values import RunOptions, ToolCheck, ToolVerdict
from bridge.contract import SandboxSettings
from bridge.policy import sandbox as runs_sandbox
from bridge.process import bwrap
from bridge.process.spawn import ChildProcess

PREFIX = ("/usr/bin/bwrap", "--ro-bind", "/", "/", "--unshare-net", "--")


def _box(tmp_path: Path, mode: str = "workspace-write", network: bool = False) -> Sandbox:
    hidden = (str(tmp_path / "home" / ".ssh"),)
    return Sandbox(mode, network, str(tmp_path / "ws"), hidden, PREFIX)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    (tmp_path / "ws").mkdir()
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    return _box(tmp_path)


def test_the_sandbox_dir_is_named_as_the_bridge_names_it() -> None:
    assert claude_sandbox.SANDBOX_DIR_ENV == runs_sandbox.SANDBOX_DIR_ENV


def test_a_bash_command_runs_under_the_prefix_with_no_capability(box: Sandbox) -> None:
    confined = confine("Bash", {"command": "cat ~/.ssh/id_rsa", "timeout": 5}, box)
    assert confined.refused is None and confined.input["timeout"] == 5
    words = shlex.split(confined.input["command"])
    assert words[: len(PREFIX) - 1] == list(PREFIX[:-1])
    assert words[-6:] == ["--cap-drop", "ALL", "--", words[-3], "-c", "cat ~/.ssh/id_rsa"]


@pytest.mark.parametrize(
    ("tool", "path", "why"),
    [
        ("Read", "~/.ssh/id_rsa", "outside"),
        ("Write", "{home}/pwned.txt", "outside"),
        ("Read", "{home}/.ssh/id_rsa", "masked secret"),
        ("Read", "/proc/self/environ", "system path"),
        ("Edit", "{ws}/../escape.txt", "outside"),
        ("Write", "file://{home}/pwned.txt", "outside"),
        ("Read", "@{home}/.ssh/id_rsa", "masked secret"),
        ("Glob", "/etc", "outside"),
        ("Grep", "{home}", "outside"),
    ],
)
def test_a_file_tool_outside_the_workspace_is_refused(
    box: Sandbox, tmp_path: Path, tool: str, path: str, why: str
) -> None:
    key = claude_sandbox.PATH_ARGUMENT[tool]
    given = path.format(home=tmp_path / "home", ws=box.workspace)
    confined = confine(tool, {key: given}, box)
    assert confined.refused is not None and why in confined.refused


def test_a_symlink_out_of_the_workspace_is_refused_even_dangling(box: Sandbox, tmp_path: Path) -> None:
    link = Path(box.workspace) / "link"
    link.symlink_to(tmp_path / "home" / ".profile")
    assert refusal(str(link), box.workspace, box.hidden) is not None
    assert refusal("link", box.workspace, box.hidden) is not None


def test_the_workspace_through_a_symlink_is_the_workspace(box: Sandbox, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(box.workspace)
    assert refusal(str(alias / "a.txt"), box.workspace, box.hidden) is None
    assert refusal(str(alias / ".." / "home" / "x"), box.workspace, box.hidden) is not None


def test_a_secret_inside_the_workspace_stays_masked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    assert refusal(str(home / ".ssh" / "id_rsa"), str(home), (str(home / ".ssh"),)) is not None
    assert refusal(str(home / "notes.txt"), str(home), (str(home / ".ssh"),)) is None


def test_files_inside_the_workspace_are_allowed_and_read_only_refuses_writes(
    box: Sandbox, tmp_path: Path
) -> None:
    inside = str(Path(box.workspace) / "a.txt")
    assert confine("Write", {"file_path": inside, "content": "x"}, box).refused is None
    assert confine("Grep", {"pattern": "x"}, box).refused is None  # its default: the workspace
    read_only = _box(tmp_path, mode="read-only")
    assert confine("Read", {"file_path": inside}, read_only).refused is None
    refused = confine("Write", {"file_path": inside, "content": "x"}, read_only).refused
    assert refused is not None and "read-only" in refused


def test_web_tools_follow_the_network_and_unknown_tools_are_refused(box: Sandbox, tmp_path: Path) -> None:
    assert confine("WebFetch", {"url": "http://127.0.0.1/"}, box).refused == "sandbox: the network is off"
    online = _box(tmp_path, network=True)
    assert confine("WebFetch", {"url": "http://127.0.0.1/"}, online).refused is None
    assert confine("EnterWorktree", {"name": "x"}, box).refused is not None
    assert confine("SomethingNew", {}, box).refused is not None
    assert confine("TaskList", {}, box).refused is None
    assert confine("mcp__notes__add", {"text": "x"}, box).refused is None


def test_the_sandbox_is_read_from_the_bridges_board(tmp_path: Path) -> None:
    board = runs_sandbox.SandboxBoard(tmp_path)
    settings = SandboxSettings(mode="workspace-write")
    board.publish("s-1", settings, str(tmp_path), {"HOME": str(tmp_path / "home")})
    env = board.agent_env()
    found = read_sandbox(env, "s-1")
    if (board.path / "s-1").exists():  # bwrap is here: the board wrote it
        body = orjson.loads((board.path / "s-1").read_bytes())
        assert found is not None and found.mode == "workspace-write" and found.network is False
        assert list(found.prefix) == body["prefix"] and found.workspace == body["workspace"]
    assert read_sandbox(env, "no-such-session") is None
    assert read_sandbox(env, "../s-1") is None
    assert read_sandbox({}, "s-1") is None


def test_an_unreadable_sandbox_confines_everything(tmp_path: Path) -> None:
    (tmp_path / "s-1").write_text("{not json")
    found = read_sandbox({claude_sandbox.SANDBOX_DIR_ENV: str(tmp_path)}, "s-1")
    assert found is not None and found.mode == "read-only" and not found.prefix
    assert confine("Bash", {"command": "echo hi"}, found).refused is not None
    assert confine("Read", {"file_path": str(tmp_path / "s-1")}, found).refused is not None


def test_a_sandboxed_live_claude_code_asks_about_every_call(tmp_path: Path) -> None:
    sandboxed = RunOptions(prompt="", cwd=str(tmp_path), sandbox=SandboxSettings(mode="workspace-write"))
    flags = live_flags(sandboxed, "default", (), ("--session-id", "s"))
    assert flags[flags.index("--settings") + 1] == claude_sandbox.SETTINGS
    assert orjson.loads(claude_sandbox.SETTINGS) == {"permissions": {"ask": ["*"]}}
    assert "--settings" not in live_flags(RunOptions(prompt="", cwd=str(tmp_path)), "default", (), ())


@pytest.mark.parametrize(("mode", "can"), [("acceptEdits", True), ("default", True), ("plan", False),
                                           ("bypassPermissions", False)])  # fmt: skip
def test_claude_code_can_be_sandboxed_unless_it_asks_about_nothing(mode: str, can: bool) -> None:
    assert ClaudeAgent.from_settings(mode, ()).can_sandbox is can


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write_now(self, data: bytes) -> None:
        self.lines.extend(orjson.loads(line) for line in data.splitlines() if line)


def _asked(tool: str, arguments: dict[str, Any]) -> bytes:
    request = {"subtype": "can_use_tool", "tool_name": tool, "input": arguments, "tool_use_id": "t1"}
    return orjson.dumps({"type": "control_request", "request_id": f"r-{tool}", "request": request})


async def _answers(env: dict[str, str], argv: tuple[str, ...], *asked: bytes) -> list[dict[str, Any]]:
    """What a ClaudeLive answers to `asked`, in their order, its gate allowing all it is given."""
    stdin = _Stdin()
    child = SimpleNamespace(stdin=stdin, argv=argv, handle=None)
    client = ClaudeLive(cast(ChildProcess, child))
    client._env = env
    gated: list[str] = []

    async def allow(call: ToolCheck) -> ToolVerdict:
        gated.append(call.tool)
        return ToolVerdict(allow=True)

    client.asks = allow
    async with anyio.create_task_group() as tasks:
        client._tasks = tasks
        client._dispatch(list(asked))
    answers = {line["response"]["request_id"]: line["response"]["response"] for line in stdin.lines}
    return [answers[orjson.loads(line)["request_id"]] for line in asked]


SANDBOXED = ("claude", "--permission-prompt-tool", "stdio", "--settings", claude_sandbox.SETTINGS,
             "--session-id", "s-1")  # fmt: skip


@pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}")
async def test_the_live_client_confines_bash_and_refuses_a_read_outside(tmp_path: Path) -> None:
    board = runs_sandbox.SandboxBoard(tmp_path)
    board.publish("s-1", SandboxSettings(mode="workspace-write"), str(tmp_path), {"HOME": "/nowhere"})
    assert (board.path / "s-1").exists(), "the board wrote no sandbox though bwrap works"
    bash, read = await _answers(
        board.agent_env(),
        SANDBOXED,
        _asked("Bash", {"command": "echo hi"}),
        _asked("Read", {"file_path": "/etc/passwd"}),
    )
    assert bash["behavior"] == "allow", bash
    filter_file = shlex.quote(str(board.path / runs_sandbox.SECCOMP_FILE))  # the prefix reads it on fd 3
    assert bash["updatedInput"]["command"].endswith(f"-c 'echo hi' 3<{filter_file}")
    assert "bwrap" in bash["updatedInput"]["command"] and "--unshare-net" in bash["updatedInput"]["command"]
    assert read["behavior"] == "deny" and "outside the workspace" in read["message"]


async def test_a_sandboxed_claude_code_whose_sandbox_dir_is_unknown_runs_nothing() -> None:
    (bash,) = await _answers({}, SANDBOXED, _asked("Bash", {"command": "echo hi"}))
    assert bash["behavior"] == "deny" and bash["message"].startswith("sandbox:")
    (unsandboxed,) = await _answers(
        {}, ("claude", "--session-id", "s-1"), _asked("Bash", {"command": "echo hi"})
    )
    assert unsandboxed == {"behavior": "allow", "updatedInput": {"command": "echo hi"}}
