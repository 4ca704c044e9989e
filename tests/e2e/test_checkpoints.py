"""Checkpoints and rewind over LSP, on real pi 1.6.0 with the scripted model: the files each turn
changed (pi's edit, and what shell commands made and deleted), a files rewind that keeps the
turns before it, a conversation rewind the model sees, the user's edits kept as conflicts, and
the edges: ignored folders, a big file, the user's own repository, a live run, no git."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import EDIT_FILE, EDIT_NEW, EDIT_ORIGINAL, ScriptedModelServer
from tests.conftest import requires_pi
from tests.support.env import PI_BIN
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import answer_or_error, bridge_config, initialize, messages_of, request, start_request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

STATE_DIR = tempfile.mkdtemp(prefix="pi-bridge-checkpoints-state-")


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR}))
async def bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    await initialize(lsp_client, {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: STATE_DIR, "PATH": str(PI_BIN)}))
async def gitless_bridge(lsp_client: LanguageClient, pi_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    options = {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "warmPool": False}
    lsp_client.init_result = await initialize(lsp_client, options)  # type: ignore[attr-defined]
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """notes.txt (the edit scenario's file), old.txt, an ignored build/ and the user's own repo
    with a commit and a stash."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / EDIT_FILE).write_text(EDIT_ORIGINAL)
    (ws / "old.txt").write_text("old\n")
    (ws / ".gitignore").write_text("build/\n")
    (ws / "build").mkdir()
    (ws / "build" / "artifact.bin").write_text("built\n")
    (ws / "stashed.txt").write_text("committed\n")
    _git(ws, "init", "-q")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "the user's commit")
    (ws / "stashed.txt").write_text("work in progress\n")
    _git(ws, "stash", "-q")
    return ws


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u"}
    env["GIT_COMMITTER_EMAIL"] = "u@x"
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _users_repo(ws: Path) -> tuple[str, str, str, str]:
    return (
        _git(ws, "status", "--porcelain"),
        _git(ws, "stash", "list"),
        _git(ws, "rev-parse", "HEAD"),
        _git(ws, "ls-files", "--stage"),
    )


async def _run(client: LanguageClient, ws: Path, model: str, prompt: str, **more: Any) -> Any:
    params = {"prompt": prompt, "provider": "fake", "model": model, "cwd": str(ws), **more}
    with anyio.fail_after(60):
        result = await request(client, "pi/run", params)
    assert result["status"] == "completed", result
    assert_stream_invariants(messages_of(client).by_run[result["runId"]])
    return result


async def _checkpoints(client: LanguageClient, session: str, count: int) -> list[dict[str, Any]]:
    """The conversation's checkpoints once all `count` turns are recorded (each turn's record is
    written after its answer, off the run's path)."""
    with anyio.fail_after(30):
        while True:
            listed = await request(client, "pi/checkpoints", {"sessionId": session})
            assert listed["available"] is True, listed
            if len(listed["checkpoints"]) >= count:
                return listed["checkpoints"]
            await anyio.sleep(0.05)


async def _three_turns(client: LanguageClient, ws: Path) -> tuple[str, list[dict[str, Any]], list[Any]]:
    first = await _run(client, ws, "edit", "edit the notes")
    session = first["sessionId"]
    second = await _run(client, ws, "shell", "echo made > new.txt && rm old.txt", sessionId=session)
    third = await _run(client, ws, "shell", "echo more >> notes.txt && echo x > extra.txt", sessionId=session)
    return session, await _checkpoints(client, session, 3), [first, second, third]


async def test_each_turn_s_files_are_listed_and_a_files_rewind_keeps_the_turns_before(
    bridge: LanguageClient, workspace: Path
) -> None:
    repo_before = _users_repo(workspace)
    session, listed, runs = await _three_turns(bridge, workspace)
    assert [c["prompt"] for c in listed] == [
        "edit the notes",
        "echo made > new.txt && rm old.txt",
        "echo more >> notes.txt && echo x > extra.txt",
    ]
    assert [c["files"] for c in listed] == [["notes.txt"], ["new.txt", "old.txt"], ["extra.txt", "notes.txt"]]
    assert [c["runId"] for c in listed] == [r["runId"] for r in runs]
    second = listed[1]["checkpointId"]
    dry = await request(
        bridge,
        "pi/rewind",
        {"sessionId": session, "checkpointId": second, "restore": "files", "dryRun": True},
    )
    assert dry == {
        "restored": ["extra.txt", "new.txt", "notes.txt", "old.txt"],
        "conflicts": [],
        "sessionId": session,
        "dryRun": True,
    }
    assert (workspace / "new.txt").exists() and not (workspace / "old.txt").exists(), (
        "a dry run changes nothing"
    )
    done = await request(
        bridge, "pi/rewind", {"sessionId": session, "checkpointId": second, "restore": "files"}
    )
    assert done["restored"] == dry["restored"] and done["dryRun"] is False
    assert (workspace / "old.txt").read_text() == "old\n"
    assert not (workspace / "new.txt").exists() and not (workspace / "extra.txt").exists()
    assert (workspace / EDIT_FILE).read_text() == EDIT_ORIGINAL.replace("line two", EDIT_NEW), "turn 1 stays"
    assert (workspace / "build" / "artifact.bin").read_text() == "built\n", "the ignored folder is untouched"
    # Back to before the first prompt: the workspace is the user's again, and so is the repo.
    first = listed[0]["checkpointId"]
    await request(bridge, "pi/rewind", {"sessionId": session, "checkpointId": first, "restore": "files"})
    assert (workspace / EDIT_FILE).read_text() == EDIT_ORIGINAL
    assert _users_repo(workspace) == repo_before, "the user's status, stash, HEAD and index are as they were"
    old_side = await request(
        bridge, "pi/checkpointFile", {"sessionId": session, "checkpointId": second, "path": "old.txt"}
    )
    assert old_side == {"path": "old.txt", "content": "old\n", "binary": False}
    never = await request(
        bridge, "pi/checkpointFile", {"sessionId": session, "checkpointId": second, "path": "new.txt"}
    )
    assert never["content"] is None


async def test_a_conversation_rewind_continues_from_before_the_prompt_on_a_new_session(
    bridge: LanguageClient, workspace: Path, scripted_model: ScriptedModelServer
) -> None:
    session, listed, _ = await _three_turns(bridge, workspace)
    rewound = await request(
        bridge,
        "pi/rewind",
        {"sessionId": session, "checkpointId": listed[1]["checkpointId"], "restore": "conversation"},
    )
    assert rewound["sessionId"] != session and rewound["restored"] == []
    assert (workspace / "new.txt").exists(), "a conversation rewind leaves the files"
    scripted_model.reset()
    after = await _run(bridge, workspace, "echo", "what came before?", sessionId=rewound["sessionId"])
    assert after["sessionId"] == rewound["sessionId"]
    (body,) = [r["body"] for r in scripted_model.requests if r["model"] == "echo"]
    prompts = [m["content"] for m in body["messages"] if m["role"] == "user"]
    texts = [p if isinstance(p, str) else "".join(x.get("text", "") for x in p) for p in prompts]
    assert texts == ["edit the notes", "what came before?"], texts
    # The old branch stays readable, and the new one keeps the checkpoints before the rewind.
    old = await request(bridge, "pi/session", {"sessionId": session})
    assert len(old["turns"]) == 3
    kept = await request(bridge, "pi/checkpoints", {"sessionId": rewound["sessionId"]})
    assert [c["checkpointId"] for c in kept["checkpoints"]][:1] == [listed[0]["checkpointId"]]


async def test_a_file_the_user_changed_after_a_turn_is_a_conflict_and_kept_unless_forced(
    bridge: LanguageClient, workspace: Path
) -> None:
    first = await _run(bridge, workspace, "edit", "edit the notes")
    session = first["sessionId"]
    await _run(bridge, workspace, "shell", "echo made > new.txt && rm old.txt", sessionId=session)
    await _checkpoints(bridge, session, 2)  # the turn's record is written just after its answer
    (workspace / EDIT_FILE).write_text("the user's own words\n")
    await _run(bridge, workspace, "shell", "echo x > extra.txt", sessionId=session)
    listed = await _checkpoints(bridge, session, 3)
    second = listed[1]["checkpointId"]
    done = await request(
        bridge, "pi/rewind", {"sessionId": session, "checkpointId": second, "restore": "files"}
    )
    assert done["conflicts"] == ["notes.txt"] and done["restored"] == ["extra.txt", "new.txt", "old.txt"], (
        done
    )
    assert (workspace / EDIT_FILE).read_text() == "the user's own words\n"
    forced = await request(
        bridge, "pi/rewind", {"sessionId": session, "checkpointId": second, "restore": "files", "force": True}
    )
    assert "notes.txt" in forced["restored"] and forced["conflicts"] == []
    assert (workspace / EDIT_FILE).read_text() == EDIT_ORIGINAL.replace("line two", EDIT_NEW)


async def test_a_big_file_is_left_out_with_a_note(bridge: LanguageClient, workspace: Path) -> None:
    with (workspace / "big.bin").open("wb") as big:
        big.truncate(50 * 1024 * 1024)
    first = await _run(bridge, workspace, "shell", "echo hi > small.txt")
    (checkpoint,) = await _checkpoints(bridge, first["sessionId"], 1)
    assert checkpoint["files"] == ["small.txt"]
    assert checkpoint["notes"] == ["left out big.bin: 52 MB, over the size limit"], checkpoint


async def test_the_first_tool_waits_for_the_checkpoint_even_in_full_mode(
    bridge: LanguageClient, workspace: Path
) -> None:
    # Enough files that the first snapshot takes a while: a tool that ran before it would be
    # in it, and then its turn would seem to change nothing.
    many = workspace / "many"
    many.mkdir()
    for i in range(3000):
        (many / f"f{i}.txt").write_text(f"{i}\n")
    first = await _run(bridge, workspace, "shell", "echo early > early.txt")
    (checkpoint,) = await _checkpoints(bridge, first["sessionId"], 1)
    assert checkpoint["files"] == ["early.txt"], checkpoint


async def test_a_rewind_is_refused_while_a_run_of_the_conversation_is_live(
    bridge: LanguageClient, workspace: Path
) -> None:
    first = await _run(bridge, workspace, "shell", "echo hi > a.txt")
    session = first["sessionId"]
    (checkpoint,) = await _checkpoints(bridge, session, 1)
    params = {
        "prompt": "go",
        "provider": "fake",
        "model": "slow",
        "cwd": str(workspace),
        "sessionId": session,
    }
    _, running = start_request(bridge, "pi/run", {**params, "runId": "slow-1"})
    messages = messages_of(bridge)
    await messages.wait_until(lambda: any(m["type"] == "assistant" for m in messages.by_run["slow-1"]))
    rewind = {"sessionId": session, "checkpointId": checkpoint["checkpointId"], "restore": "files"}
    with pytest.raises(JsonRpcException) as refused:
        await request(bridge, "pi/rewind", rewind)
    assert "live" in refused.value.message
    await request(bridge, "pi/cancel", {"runId": "slow-1"})
    _, error = await answer_or_error(running)
    assert error is not None and error.code == -32800
    assert (workspace / "a.txt").exists(), "nothing was rewound"


async def test_bad_rewinds_are_clear_errors(bridge: LanguageClient, workspace: Path) -> None:
    first = await _run(bridge, workspace, "shell", "echo hi > a.txt")
    session = first["sessionId"]
    await _checkpoints(bridge, session, 1)
    for params, code in (
        ({"sessionId": session, "checkpointId": "cp-nope", "restore": "files"}, -32002),
        ({"sessionId": session, "checkpointId": "x", "restore": "everything"}, -32602),
        ({"sessionId": session, "restore": "files"}, -32602),
    ):
        with pytest.raises(JsonRpcException) as refused:
            await request(bridge, "pi/rewind", params)
        assert refused.value.code == code, (params, refused.value)


async def test_without_git_checkpoints_are_off_with_the_reason_and_runs_go_on(
    gitless_bridge: LanguageClient, tmp_path: Path
) -> None:
    capabilities = gitless_bridge.init_result.capabilities.experimental["piBridge"]  # type: ignore[attr-defined]
    assert capabilities["checkpoints"]["available"] is False
    assert "git is not installed" in capabilities["checkpoints"]["reason"]
    result = await _run(gitless_bridge, tmp_path, "text", "hello")
    listed = await request(gitless_bridge, "pi/checkpoints", {"sessionId": result["sessionId"]})
    assert listed["available"] is False and "git is not installed" in listed["reason"]
    assert listed["checkpoints"] == []


async def test_a_files_rewind_never_deletes_what_the_turn_did_not_create(
    bridge: LanguageClient, workspace: Path
) -> None:
    """The user's only `.env` was ignored before the turn; the turn rewrote `.gitignore` so that
    its snapshot after holds `.env`. A big file, left out of the snapshot before, is shrunk by
    the turn. Neither is the turn's creation: a rewind, even a forced one, keeps both."""
    (workspace / ".gitignore").write_text("build/\n.env\n")
    secret = b"API_KEY=the-users-only-copy\r\n"
    (workspace / ".env").write_bytes(secret)
    with (workspace / "big.bin").open("wb") as big:
        big.truncate(50 * 1024 * 1024)
    command = "printf 'build/\\n' > .gitignore && echo made > made.txt && truncate -s 10 big.bin"
    first = await _run(bridge, workspace, "shell", command)
    session = first["sessionId"]
    (checkpoint,) = await _checkpoints(bridge, session, 1)
    assert (workspace / ".gitignore").read_text() == "build/\n", "the turn ran"
    assert ".env" in checkpoint["files"], "the snapshot after holds .env: the turn un-ignored it"
    rewind = {"sessionId": session, "checkpointId": checkpoint["checkpointId"], "restore": "files"}
    dry = await request(bridge, "pi/rewind", {**rewind, "dryRun": True, "force": True})
    assert dry["restored"] == [".gitignore", "made.txt"], dry
    done = await request(bridge, "pi/rewind", rewind)
    assert done["restored"] == [".gitignore", "made.txt"] and done["conflicts"] == [], done
    assert (workspace / ".env").read_bytes() == secret, "the user's .env is still there, byte for byte"
    assert (workspace / "big.bin").stat().st_size == 10, "a file the snapshot left out is never deleted"
    assert (workspace / ".gitignore").read_text() == "build/\n.env\n"
    assert not (workspace / "made.txt").exists(), "what the turn created is gone"
    assert (workspace / "build" / "artifact.bin").read_text() == "built\n"


async def test_a_files_rewind_puts_back_the_exact_bytes_whatever_the_workspace_s_attributes(
    bridge: LanguageClient, workspace: Path
) -> None:
    files = {
        ".gitattributes": b"* text=auto eol=crlf ident\n*.dat filter=evil\n",
        "lf.txt": b"one\ntwo\n",
        "crlf.txt": b"one\r\ntwo\r\n",
        "id.txt": b"$Id$\n",
        "filtered.dat": b"plain\n",
        "binary.bin": bytes(range(256)) * 4,
        "run.sh": b"#!/bin/sh\necho hi\n",
    }
    for name, data in files.items():
        (workspace / name).write_bytes(data)
    (workspace / "run.sh").chmod(0o755)
    (workspace / "link").symlink_to("lf.txt")
    names = " ".join(n for n in files if n != "lf.txt")
    command = (
        f"for f in {names}; do echo changed > $f; done; rm lf.txt; chmod -x run.sh; ln -sfn crlf.txt link"
    )
    first = await _run(bridge, workspace, "shell", command)
    session = first["sessionId"]
    (checkpoint,) = await _checkpoints(bridge, session, 1)
    assert set(checkpoint["files"]) == {*files, "link"}, checkpoint
    rewind = {"sessionId": session, "checkpointId": checkpoint["checkpointId"], "restore": "files"}
    await request(bridge, "pi/rewind", rewind)
    assert {name: (workspace / name).read_bytes() for name in files} == files
    assert os.access(workspace / "run.sh", os.X_OK) and not os.access(workspace / "lf.txt", os.X_OK)
    assert os.readlink(workspace / "link") == "lf.txt"
