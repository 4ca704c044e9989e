"""Where the tests run: the project's paths, the bridge's argv and environment, the markers for
real agents and cgroups, and the leak tags.

Every bridge a test starts gets the running test's tag through `bridge_env()` (pi and all its
descendants inherit it); tests/conftest.py gives every test a fresh tag, so tests/support/leaks.py
can tell whose processes are left.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support import forkserver_client as forkserver

ROOT = Path(__file__).resolve().parents[2]
FAKE_PI = ROOT / "tests" / "fakes" / "fake_pi.py"
PI_BIN = ROOT / ".tools" / "node_modules" / ".bin"
#: How a test starts a bridge: through the worker's fork server (tests/support/forkserver.py), which
#: runs `python -m bridge` in a forked interpreter whose libraries are already imported; with
#: PI_BRIDGE_TEST_EXEC=1, a fresh interpreter each time. `EXEC_BRIDGE` is always the latter.
EXEC_BRIDGE = [sys.executable, "-m", "bridge"]
FORKED = os.environ.get("PI_BRIDGE_TEST_EXEC") != "1"
BRIDGE = (
    [sys.executable, "-I", "-S", str(ROOT / "tests" / "support" / "forked_bridge.py")]
    if FORKED
    else EXEC_BRIDGE
)
TEST_TAG_ENV = "PI_BRIDGE_TEST_TAG"
#: Marks one RawBridge's processes, so its teardown checks its own runs only.
BRIDGE_MARKER_ENV = "PI_BRIDGE_TEST_BRIDGE"
WAIT = 30.0


class _Tag:
    """Leak tags: one per test (set by tests/conftest.py), and the session's, which bridges get
    when their environment is built outside any test (a pytest-lsp config built at import)."""

    session = uuid.uuid4().hex
    value = session


def current_test_tag() -> str:
    """The leak tag bridges started now get (the running test's)."""
    return _Tag.value


def session_tag() -> str:
    """The session's leak tag (bridges whose environment was built outside any test)."""
    return _Tag.session


def begin_test_tag() -> str:
    """Give the test that starts now a fresh leak tag; return it."""
    _Tag.value = uuid.uuid4().hex
    return _Tag.value


def pi_requirement(found: bool, required: bool) -> pytest.MarkDecorator:
    """Skip when pi is not found, unless it is required (then the test runs, and fails)."""
    return pytest.mark.skipif(
        not found and not required,
        reason="real pi is not installed (run .ci/run, or set PI_BRIDGE_REQUIRE_PI=1 to make this fail)",
    )


def real_pi_available() -> bool:
    """Whether the real pi can run here (project-local install or PATH)."""
    return (PI_BIN / "pi").exists() or shutil.which("pi") is not None


#: The one marker for tests that run the real pi: PI_BRIDGE_REQUIRE_PI=1 turns a skip into a failure.
requires_pi = pi_requirement(real_pi_available(), os.environ.get("PI_BRIDGE_REQUIRE_PI") == "1")

#: Claude Code as scripts/setup.sh installs it (a prefix of its own: .tools is shared).
CLAUDE_BIN = ROOT / ".tools-claude" / "node_modules" / ".bin" / "claude"

#: The marker for tests that run the real Claude Code; PI_BRIDGE_REQUIRE_PI=1 requires it too.
requires_claude = pytest.mark.skipif(
    not CLAUDE_BIN.exists() and os.environ.get("PI_BRIDGE_REQUIRE_PI") != "1",
    reason="Claude Code is not installed in .tools-claude (run scripts/setup.sh)",
)

CGROUP_REQUIRED_ENV = "PI_BRIDGE_REQUIRE_CGROUP"


def skip_without_cgroup(reason: str) -> None:
    """Skip a test that needs a writable cgroup hierarchy, or fail it when CI requires one.

    The only skip for a missing capability outside `requires_pi`: CI sets PI_BRIDGE_REQUIRE_CGROUP=1
    so that the cgroup mode can never pass by skipping there.
    """
    if os.environ.get(CGROUP_REQUIRED_ENV) == "1":
        pytest.fail(f"{reason}, and {CGROUP_REQUIRED_ENV}=1")
    pytest.skip(f"{reason} (set {CGROUP_REQUIRED_ENV}=1 to make this fail)")


def bridge_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a bridge under test: the current test's tag, pi on PATH, strict contract checks,
    and this checkout first on PYTHONPATH (a bridge started in another cwd would otherwise import
    whichever bridge the interpreter has installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env[TEST_TAG_ENV] = current_test_tag()
    env["PI_BRIDGE_STRICT"] = "1"
    env["PATH"] = f"{PI_BIN}{os.pathsep}{env.get('PATH', '')}"
    # This checkout's bridge, whatever checkout the venv's editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PI_BRIDGE_LOG_LEVEL", "INFO")
    if FORKED:
        env[forkserver.SOCKET_ENV] = forkserver.socket_path()
    env.update(extra or {})
    return env


def bridge_pid(pid: int) -> int:
    """The pid of the bridge a test started as `pid` (the fork server's launcher stands in front
    of it: signals reach the bridge through it, but /proc questions must name the bridge)."""
    return forkserver.bridge_pid(pid)


def fake_pi_command() -> list[str]:
    """The fake pi as a piCommand argv."""
    return [sys.executable, str(FAKE_PI)]


def agent_dir_with_extension(pi_agent_dir: Path, where: Path, name: str, source: str) -> Path:
    """A copy of the scripted model's pi agent dir at `where` (its sessions left out), with a
    global extension `name` whose code is `source`."""
    shutil.copytree(pi_agent_dir, where, ignore=shutil.ignore_patterns("sessions"))
    (where / "extensions").mkdir(exist_ok=True)
    (where / "extensions" / name).write_text(source)
    return where


async def claude_stored(config_dir: Path, session_id: str, text: str) -> None:
    """Wait (bounded) until Claude Code's session file holds `text`. It writes the session lazily,
    after a turn's result, and a file has no event to wait on: it is polled."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        for path in config_dir.glob(f"projects/*/{session_id}.jsonl"):
            if text in path.read_text(errors="replace"):
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"Claude Code never stored {text!r} in session {session_id}")
