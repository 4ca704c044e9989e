"""The sandbox of an agent's whole process (an ACP agent that runs its tools itself): its own
dirs writable, $HOME shown read-only even under the private /tmp, the secrets masked but its own
credentials, its model's variables kept; run for real where bubblewrap works here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.contract import SandboxSettings
from bridge.policy import sandbox
from bridge.process import bwrap

needs_bwrap = pytest.mark.skipif(not bwrap.probe().ok, reason=f"no sandbox here: {bwrap.probe().reason}")
WRITE = SandboxSettings(mode="workspace-write", network=False)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("planted-key\n")
    (home / "notes.txt").write_text("control\n")
    (home / ".agent").mkdir()
    (home / ".agent" / "auth.json").write_text("own-credential\n")
    return home


def test_home_is_never_an_own_dir_and_its_secrets_stay_masked(tmp_path: Path) -> None:
    home = _home(tmp_path)
    environ = {"HOME": str(home), "PROBE_TOKEN": "x", "AGENT_KEY": "y"}
    box = sandbox.confinement(WRITE, str(tmp_path), environ, [str(home / ".agent" / "auth.json")])
    whole = sandbox.whole_process_confinement(
        box, environ, [str(home), "/", str(home / ".agent")], ["AGENT_KEY"]
    )
    assert list(whole.writable_dirs) == [str(home / ".agent")], "neither $HOME nor / is an agent's own"
    assert str(home / ".ssh") in whole.hidden
    assert str(home / ".agent" / "auth.json") not in whole.hidden, "its own credential is its own"
    assert "PROBE_TOKEN" in whole.unset_env and "AGENT_KEY" not in whole.unset_env
    assert whole.network is True and "--unshare-net" not in bwrap.argv_prefix("bwrap", whole)
    assert list(whole.shown) == [str(home)]


def test_off_gives_no_prefix(tmp_path: Path) -> None:
    board = sandbox.SandboxBoard(tmp_path / "boards")
    assert board.process_prefix(SandboxSettings(), str(tmp_path), {}, None, (), ()) == ()


@needs_bwrap
@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
def test_a_whole_process_is_confined_for_real(tmp_path: Path, mode: str) -> None:
    """$HOME under /tmp (here) is shown, not hidden by the private /tmp: its key is masked there too."""
    home = _home(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    environ = {**os.environ, "HOME": str(home), "PROBE_TOKEN": "sekret", "AGENT_KEY": "needed"}
    board = sandbox.SandboxBoard(tmp_path / "state" / "sandboxes")
    board.agent_secrets = lambda _environ: [str(home / ".agent" / "auth.json")]
    own = (str(home / ".agent"), str(home / ".cache" / "agent"))
    settings = SandboxSettings(mode=mode, network=False)  # type: ignore[arg-type]
    prefix = board.process_prefix(settings, str(workspace), environ, None, own, ["AGENT_KEY"])
    script = (
        "echo in > inside; echo x > $HOME/pwned; echo s > $HOME/.agent/state; echo c > $HOME/.cache/agent/c;"
        " cat $HOME/notes.txt $HOME/.agent/auth.json; cat $HOME/.ssh/id_rsa;"
        " echo tok=${PROBE_TOKEN:-none} key=${AGENT_KEY:-none}"
    )
    done = subprocess.run(
        [*prefix, "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        check=False,
    )
    assert (workspace / "inside").exists() is (mode == "workspace-write"), done.stderr
    assert not (home / "pwned").exists(), "a write to $HOME leaves no file"
    assert (home / ".agent" / "state").read_text() == "s\n", "its own dir is writable"
    assert (home / ".cache" / "agent" / "c").read_text() == "c\n", "a missing own dir is made first"
    assert "control\nown-credential\n" in done.stdout and "planted-key" not in done.stdout, done
    assert "tok=none key=needed" in done.stdout
    assert "Read-only file system" in done.stderr
    board.remove()
