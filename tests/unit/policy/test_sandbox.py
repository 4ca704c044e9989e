"""The sandbox's argv (bwrap's mount order, masks, network, variables) and its policy, run for real
where bubblewrap works here."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest

from bridge.contract import RunParams, SandboxSettings
from bridge.policy import sandbox
from bridge.process import bwrap, seccomp

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
def test_a_prepared_board_publishes_a_conversations_sandbox_without_starting_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the board learns of bwrap is learnt by `prepare` (the bridge calls it in a worker
    thread at start): the first prompt's publish, on the event loop, runs nothing."""
    bwrap._probe.cache_clear()
    bwrap._has_disable_userns.cache_clear()
    board = sandbox.SandboxBoard(tmp_path / "boards")
    board.prepare()
    started: list[object] = []

    def run(*args: object, **kwargs: object) -> None:
        started.append(args)
        raise AssertionError("a process was started on the prompt's path")

    monkeypatch.setattr(subprocess, "run", run)
    board.publish("s-1", SandboxSettings(mode="workspace-write"), str(tmp_path), {"HOME": "/nowhere"})
    assert started == [] and (board.path / "s-1").exists()
    board.remove()


def test_a_conversation_without_a_sandbox_starts_no_process_on_the_prompt_s_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`off` needs no bwrap: its publish (every prompt, on the event loop) probes nothing, even
    before anything was learnt of bwrap (the ACP front's first prompt ran bwrap twice there)."""
    bwrap._probe.cache_clear()
    bwrap._has_disable_userns.cache_clear()
    board = sandbox.SandboxBoard(tmp_path / "boards")

    def run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process was started on the prompt's path")

    monkeypatch.setattr(subprocess, "run", run)
    board.publish("s-1", SandboxSettings(mode="off"), str(tmp_path), {"HOME": "/nowhere"})
    assert not (board.path / "s-1").exists()
    board.remove()


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


# -- issue 34: the sandbox in depth ----------------------------------------------------------------


def test_the_argv_drops_every_capability_and_nested_user_namespaces() -> None:
    argv = bwrap.argv_prefix("bwrap", _box(Path("/srv/ws"), seccomp_fd=3))
    assert "--unshare-user" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--seccomp") + 1] == "3"
    assert "--seccomp" not in bwrap.argv_prefix("bwrap", _box(Path("/srv/ws")))


def test_masks_hold_with_the_workspace_at_home_or_above(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".netrc").write_text("machine x password y\n")
    (home / ".git").mkdir()
    hidden = [str(home / ".ssh"), str(home / ".netrc")]
    for workspace in (home, tmp_path):
        argv = bwrap.argv_prefix("bwrap", _box(workspace, hidden=hidden, read_only=[str(home / ".git")]))
        bind = argv.index("--bind")
        read_only = argv.index(str(home / ".git"))
        assert argv[argv.index(str(home / ".ssh")) - 1] == "--tmpfs"
        assert argv[argv.index(str(home / ".netrc")) - 2 : argv.index(str(home / ".netrc"))] == [
            "--ro-bind",
            os.devnull,
        ]
        assert bind < read_only < argv.index(str(home / ".ssh")), argv  # the masks come after both


def test_a_mask_that_holds_the_workspace_comes_before_its_bind() -> None:
    state = Path(tempfile.mkdtemp(prefix="pi-bridge-state-", dir="/var/tmp"))  # /tmp is private already
    try:
        workspace = state / "ws"
        workspace.mkdir()
        argv = bwrap.argv_prefix("bwrap", _box(workspace, hidden=[str(state)]))
        assert argv[argv.index(str(state)) - 1] == "--tmpfs" and argv.index(str(state)) < argv.index("--bind")
    finally:
        shutil.rmtree(state)


def test_read_only_paths_that_do_not_exist_get_no_mount(tmp_path: Path) -> None:
    (tmp_path / ".pi").mkdir()
    paths = sandbox.read_only_paths(str(tmp_path), {"HOME": "/nowhere"}, [".pi"])
    argv = bwrap.argv_prefix("bwrap", _box(tmp_path, read_only=paths))
    assert argv[argv.index(str(tmp_path / ".pi")) - 1] == "--ro-bind"
    assert not any(".claude" in arg or ".git" in arg for arg in argv)
    home = sandbox.read_only_paths(str(tmp_path), {"HOME": str(tmp_path)})
    assert str(tmp_path / ".bashrc") in home and str(tmp_path / ".bashrc") not in paths
    assert bwrap.argv_prefix("bwrap", _box(tmp_path, writable=False, read_only=paths)).count("--ro-bind") == 2


def test_the_bridge_s_and_the_client_s_variables_are_unset() -> None:
    environ = {
        "PI_BRIDGE_MCP_CONFIG": "/s/mcp/x",
        "PI_BRIDGE_RUN_TOKEN": "t",
        "PATH": "/bin",
        "SSH_AUTH_SOCK": "/s",
    }
    given = {"MY_SETTING": "value", "PATH": "/opt/bin", "LC_ALL": "C"}
    unset = sandbox.secret_vars(environ, given)
    assert {"PI_BRIDGE_MCP_CONFIG", "PI_BRIDGE_GATE_DIR", "PI_BRIDGE_SANDBOX_DIR", "MY_SETTING"} <= set(unset)
    assert {"SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"} <= set(unset)
    assert not {"PATH", "LC_ALL", "PI_BRIDGE_RUN_TOKEN"} & set(unset)


def test_the_board_hides_the_state_dir_and_writes_the_filter_once(tmp_path: Path) -> None:
    board = sandbox.SandboxBoard(tmp_path / "state" / sandbox.SANDBOXES_DIR)
    board.publish("s-1", SandboxSettings(mode="workspace-write"), str(tmp_path), {"HOME": "/nowhere"})
    if bwrap.probe().path is None:
        return
    body = orjson.loads((board.path / "s-1").read_bytes())
    assert str(tmp_path / "state") in body["hidden"]
    assert body["seccomp"] == str(board.path / sandbox.SECCOMP_FILE)
    assert Path(body["seccomp"]).read_bytes() == seccomp.program()
    assert body["prefix"][body["prefix"].index("--seccomp") + 1] == str(sandbox.SECCOMP_FD)
    board.remove()


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_checks_the_arch_first_and_refuses_unix_sockets(machine: str) -> None:
    raw = seccomp.program(machine)
    assert raw is not None and len(raw) % 8 == 0
    ops = [struct.unpack("=HBBI", raw[i : i + 8]) for i in range(0, len(raw), 8)]
    arch = seccomp.ARCHES[machine]
    assert ops[0] == (0x20, 0, 0, 4) and ops[1][0] == 0x15 and ops[1][3] == arch.audit
    kill = 1 + ops[1][2] + 1
    assert ops[kill] == (0x06, 0, 0, seccomp.RET_KILL_PROCESS)  # a foreign arch is killed
    assert (0x06, 0, 0, seccomp.RET_ERRNO | errno.EPERM) in ops
    assert any(op[0] == 0x15 and op[3] == seccomp.AF_UNIX for op in ops)
    assert (machine == "x86_64") == any(op[0] == 0x35 and op[3] == 0x40000000 for op in ops)  # x32
    for index, (code, jt, jf, _k) in enumerate(ops):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert index + 1 + max(jt, jf) < len(ops)
    assert seccomp.program("riscv64") is None


#: What a unix-socket connect printed: the errno's name, or that it got through.
_CONNECT = """import errno, socket
try:
    socket.socket(socket.AF_UNIX).connect({path!r})
except OSError as exc:
    print("socket-" + errno.errorcode[exc.errno])
else:
    print("socket-connected")
"""
#: A python any user can run (the venv's may live in a home only its owner can enter).
_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
_USERS = ["root"] + (["nobody"] if os.geteuid() == 0 and shutil.which("setpriv") else [])


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
@pytest.mark.parametrize("user", _USERS)
def test_the_confined_command_cannot_escape_as_root_or_as_a_user(user: str, network: bool) -> None:
    """The whole prefix with its filter on a real command, as root (CI, containers) and, when
    root can switch, as an unprivileged user (a desktop): the same promises either way."""
    found = bwrap.probe()
    assert found.path is not None
    base = Path(tempfile.mkdtemp(prefix="pi-bridge-box-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        workspace, secret, outside = base / "ws", base / "secret", base / "outside.sock"
        (workspace / ".git" / "hooks").mkdir(parents=True)
        secret.mkdir()
        (secret / "key").write_text("planted\n")
        workspace.chmod(0o777)
        filter_file = base / "filter.bpf"
        filter_file.write_bytes(seccomp.program() or b"")
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(outside))
        outside.chmod(0o777)
        server.listen(1)
        server.setblocking(False)
        box = _box(
            workspace,
            network=network,
            hidden=[str(secret)],
            read_only=[str(workspace / ".git")],
            seccomp_fd=3,
        )
        prefix = " ".join(shlex.quote(arg) for arg in bwrap.argv_prefix(found.path, box))
        python = _PYTHON
        script = (
            "grep CapEff /proc/self/status; umount " + str(secret) + " 2>&1 | grep -c . ;"
            " mount -o remount,rw / 2>/dev/null || echo remount-refused;"
            " cat " + str(secret / "key") + " 2>/dev/null || echo key-hidden;"
            " echo x > .git/hooks/pre-commit 2>/dev/null || echo hooks-read-only;"
            " unshare -U true 2>/dev/null || echo userns-refused;"
            f" {python} -c {shlex.quote(_CONNECT.format(path=str(outside)))};"
            f" {python} -c \"import socket; a, b = socket.socketpair(); a.send(b'p'); print(b.recv(1).decode())\";"
            " echo in > inside"
        )
        switch = "" if user == "root" else "setpriv --reuid=65534 --regid=65534 --clear-groups "
        command = f"exec {switch}{prefix} bash -c {shlex.quote(script)} 3<{shlex.quote(str(filter_file))}"
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False
        )
        lines = done.stdout.split("\n")
        assert lines[0] == "CapEff:\t0000000000000000", done
        expected = [
            "remount-refused",
            "key-hidden",
            "hooks-read-only",
            "userns-refused",
            "socket-EPERM",
            "p",
        ]
        assert lines[2:8] == expected, done
        assert (workspace / "inside").read_text() == "in\n"
        assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
        with pytest.raises(BlockingIOError):
            server.accept()
        server.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_bwrap
def test_the_board_leaves_a_file_that_holds_the_sandbox_already(tmp_path: Path) -> None:
    """Each prompt publishes its conversation's sandbox: the same one is not written again (a
    write on the prompt's path waits on the disk), a changed or deleted file is."""
    board = sandbox.SandboxBoard(tmp_path)
    settings = SandboxSettings(mode="workspace-write")
    target = board.path / "s-1"
    board.publish("s-1", settings, str(tmp_path), {"HOME": "/nowhere"})
    first = os.stat(target)
    board.publish("s-1", settings, str(tmp_path), {"HOME": "/nowhere"})
    again = os.stat(target)
    assert (again.st_ino, again.st_ctime_ns) == (first.st_ino, first.st_ctime_ns)
    board.publish("s-1", SandboxSettings(mode="read-only"), str(tmp_path), {"HOME": "/nowhere"})
    assert orjson.loads(target.read_bytes())["mode"] == "read-only"
    target.write_bytes(b"{}")  # a command changes it: the next publish puts it back
    board.publish("s-1", SandboxSettings(mode="read-only"), str(tmp_path), {"HOME": "/nowhere"})
    assert orjson.loads(target.read_bytes())["mode"] == "read-only"
    board.publish("s-1", SandboxSettings(), str(tmp_path), {})
    assert not target.exists()
    board.publish("s-1", SandboxSettings(), str(tmp_path), {})
    board.publish("s-1", settings, str(tmp_path), {"HOME": "/nowhere"})
    assert orjson.loads(target.read_bytes())["mode"] == "workspace-write"
    board.remove()
