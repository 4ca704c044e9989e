"""The wheel carries everything a run needs: built with `python -m build`, installed into a fresh
venv outside the checkout, it answers --version, passes the doctor and runs the demo end to end
(the scripted model included) against the real pi.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import __version__
from tests.conftest import requires_pi
from tests.support.env import PI_BIN, ROOT

pytestmark = [pytest.mark.slow, requires_pi]


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _sources(work: Path) -> Path:
    """The package's sources alone, copied under `work`: a build writes its egg-info and build/
    beside them, never into the checkout that tests running beside this one import."""
    sources = work / "sources"
    sources.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, sources / name)
    shutil.copytree(ROOT / "bridge", sources / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    return sources


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """(the venv's bin dir, an environment without the checkout) with only the wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(_sources(work))],
        cwd=work,
    )
    wheels = sorted((work / "dist").glob("pi_bridge-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", str(work / "venv")], cwd=work)
    bin_dir = work / "venv" / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheels[0])], cwd=work)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PI_BRIDGE_PYTHON", "PI_CODING_AGENT_DIR")
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), str(PI_BIN), env.get("PATH", "")])
    env["HOME"] = str(work / "home")
    (work / "home").mkdir()
    yield bin_dir, env


def test_the_installed_wheel_runs_from_its_venv_not_the_checkout(
    installed: tuple[Path, dict[str, str]],
) -> None:
    bin_dir, env = installed
    where = _run(
        [str(bin_dir / "python"), "-c", "import bridge; print(bridge.__file__)"], cwd=bin_dir, env=env
    )
    assert where.strip().startswith(str(bin_dir.parent)), where
    assert not where.strip().startswith(str(ROOT))


def test_the_installed_wheel_answers_version(installed: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = installed
    assert (
        _run([str(bin_dir / "pi-bridge"), "--version"], cwd=bin_dir, env=env).strip()
        == f"pi-bridge {__version__}"
    )


def test_the_installed_wheel_passes_the_doctor_with_its_scripted_model(
    installed: tuple[Path, dict[str, str]],
) -> None:
    bin_dir, env = installed
    report = _run([str(bin_dir / "pi-bridge"), "--scripted-model", "doctor"], cwd=bin_dir, env=env)
    assert "All set" in report


def test_the_installed_wheel_runs_the_demo_end_to_end(installed: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = installed
    out = _run(
        [str(bin_dir / "pi-bridge"), "demo", "Say hello, then run echo hi with bash"], cwd=bin_dir, env=env
    )
    assert "[session.started]" in out
    assert '[tool.call bash] {"command": "echo hi"}' in out
    assert "[tool.completed] hi" in out
    assert "# result: status=completed" in out


def test_the_installed_wheel_carries_pis_gate_extension(installed: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = installed
    code = "from bridge.agents.pi.command import GATE_EXTENSION as e; print(e.is_file(), e)"
    found, path = _run([str(bin_dir / "python"), "-c", code], cwd=bin_dir, env=env).split(maxsplit=1)
    assert found == "True" and path.strip().startswith(str(bin_dir.parent)), path
