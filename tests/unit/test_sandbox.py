"""The sandbox's argv (bwrap's mount order, masks, network, variables) and its policy, run for real
where bubblewrap works here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from bridge.contract import RunParams, SandboxSettings
from bridge.process import bwrap
from bridge.runs import sandbox

needs_bwrap = pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}")


def _box(workspace: Path, **changes: object) -> bwrap.Confinement:
    fields: dict[str, object] = {"workspace": str(workspace), "writable": True, "network": False, **changes}
    return bwrap.Confinement(**fields)  # type: ignore[arg-type]


def test_the_private_tmp_comes_before_the_workspace_bind() -> None:
    argv = bwrap.argv_prefix("bwrap", _box(Path("/tmp/ws")))
    assert argv.index("/tmp") < argv.index("--bind")
    assert argv[argv.index("--bind") : argv.index("--bind") + 3] == ["--bind", "/tmp/ws", "/tmp/ws"]
    assert "--unshare-net" in argv and "--die-with-parent" in argv and argv[-1] == "--"


def test_read_only_and_network_change_the_argv() -> None:
    argv = bwrap.argv_prefix("bwrap", _box(Path("/srv/ws"), writable=False, network=True))
    assert "--bind" not in argv and "--unshare-net" not in argv
    assert argv[argv.index("/srv/ws") - 1 : argv.index("/srv/ws") + 2] == ["--ro-bind", "/srv/ws", "/srv/ws"]


def test_masks_cover_existing_secrets_outside_tmp_and_the_workspace(tmp_path: Path) -> None:
    home = Path(os.path.realpath(Path.home()))
    argv = bwrap.argv_prefix("bwrap", _box(tmp_path, hidden=[str(tmp_path / "x"), "/tmp/.ssh", "/missing"]))
    assert "/missing" not in argv and "/tmp/.ssh" not in argv and str(tmp_path / "x") not in argv
    env = {"HOME": str(home), "OPENAI_API_KEY": "v", "PATH": "/bin"}
    assert str(home / ".ssh") in sandbox.hidden_paths(env)
    assert "/agent/auth.json" in sandbox.hidden_paths(env, ["/agent/auth.json"])
    unset = sandbox.secret_vars(env)
    assert "OPENAI_API_KEY" in unset and "PATH" not in unset and "HOME" not in unset


def test_a_run_sandbox_wins_and_off_is_the_default() -> None:
    default = SandboxSettings(mode="read-only")
    run = SandboxSettings(mode="workspace-write", network=True)
    assert sandbox.settings_of(run, default) == run
    assert sandbox.settings_of(None, default) == default
    assert sandbox.settings_of(None, None).mode == "off"
    assert SandboxSettings(mode="workspace-write").network is False


@pytest.mark.parametrize(
    "raw", [{"mode": "on"}, {"mode": "workspace-write", "network": "yes"}, {"mode": "off", "extra": 1}]
)
def test_bad_sandbox_params_are_rejected(raw: object) -> None:
    with pytest.raises(ValueError, match="sandbox"):
        RunParams.model_validate({"prompt": "p", "sandbox": raw})


def test_an_agent_that_cannot_be_wrapped_is_refused_with_the_fix() -> None:
    error = sandbox.problem(SandboxSettings(mode="workspace-write"), "Claude Code", can_wrap=False)
    assert error is not None and error.kind == "sandbox" and "mode: off" in error.message
    assert sandbox.problem(SandboxSettings(), "Claude Code", can_wrap=False) is None


def test_missing_bwrap_is_reported_with_the_install_fix(tmp_path: Path) -> None:
    found = bwrap.probe(str(tmp_path))
    assert not found.ok and found.fix is not None and "apt-get install bubblewrap" in found.fix


def test_the_board_writes_the_prefix_and_off_removes_it(tmp_path: Path) -> None:
    board = sandbox.SandboxBoard(tmp_path)
    settings = SandboxSettings(mode="workspace-write")
    board.publish("s-1", settings, str(tmp_path), {"HOME": "/nowhere"})
    if bwrap.probe().path is None:
        assert not (board.path / "s-1").exists()
        return
    body = orjson.loads((board.path / "s-1").read_bytes())
    assert body["mode"] == "workspace-write" and body["workspace"] == os.path.realpath(tmp_path)
    assert body["prefix"][0] == bwrap.probe().path
    board.publish("../escape", settings, str(tmp_path), {})
    assert sorted(p.name for p in board.path.iterdir()) == [sandbox.SECCOMP_FILE, "s-1"]
    board.publish("s-1", SandboxSettings(), str(tmp_path), {})
    assert not (board.path / "s-1").exists()
    board.remove()
    assert not board.path.exists()


@needs_bwrap
def test_the_argv_confines_a_real_command(tmp_path: Path) -> None:
    found = bwrap.probe()
    assert found.path is not None
    workspace = tmp_path / "ws"
    workspace.mkdir()
    secret = Path.home() / ".ssh"
    prefix = bwrap.argv_prefix(found.path, _box(workspace, hidden=[str(secret)], unset_env=["PROBE_TOKEN"]))
    script = (
        "echo in > inside; echo $PROBE_TOKEN; ls -A " + str(secret) + " | wc -l;"
        " touch /etc/pi-bridge-probe 2>&1 | grep -c Read-only"
    )
    bash = shutil.which("bash") or "/bin/bash"
    done = subprocess.run(
        [*prefix, bash, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PROBE_TOKEN": "sekret"},
        check=False,
    )
    assert (workspace / "inside").read_text() == "in\n"
    lines = done.stdout.split("\n")
    assert lines[0] == "" and lines[1].strip() == "0" and lines[2].strip() == "1", done
