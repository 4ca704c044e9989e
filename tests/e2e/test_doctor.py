"""`pi-bridge doctor` on a machine missing each part in turn: the report, the fix and the exit code.

Each test runs the real `python -m bridge doctor` with a controlled PATH (a temp dir holding only
the node and pi it should see, real or a tiny fake script), a clean HOME and chosen key variables.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bridge.scripted_model import write_pi_agent_dir
from bridge.tools.doctor import RUNTIME_DEPENDENCIES, check_python
from tests.conftest import requires_pi
from tests.support.env import CLAUDE_BIN, PI_BIN, ROOT, requires_claude

SECRET = "sk-ant-doctor-secret-0123456789abcdef"


def _real(name: str) -> Path:
    found = PI_BIN / name if (PI_BIN / name).exists() else shutil.which(name)
    assert found, f"{name} is needed for this test"
    return Path(found)


class Machine:
    """A PATH with only the chosen programs, a clean HOME, and no provider keys."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.home = root / "home"
        self.bin.mkdir()
        self.home.mkdir()
        self.env: dict[str, str] = {
            "PATH": str(self.bin),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT),
        }

    def link(self, name: str) -> None:
        """Put the real `name` (node or pi) on this machine's PATH."""
        (self.bin / name).symlink_to(_real(name))

    def fake(self, name: str, script: str) -> Path:
        """A tiny shell script standing in for `name`."""
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)
        return path

    def doctor(self, *args: str, python: str = sys.executable) -> tuple[int, str]:
        """Run `python -m bridge [args]`; its exit code and stdout+stderr."""
        done = subprocess.run(
            [python, "-m", "bridge", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    def doctor_json(self, *args: str, python: str = sys.executable) -> tuple[int, dict[str, Any]]:
        """`doctor --json`: exit code and the checks by name."""
        code, out = self.doctor(*args, "doctor", "--json", python=python)
        report = json.loads(out)
        assert report["ok"] is (code == 0)
        return code, {check["name"]: check for check in report["checks"]}


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def _line(report: str, label: str) -> str:
    """The report's line for `label` (without its status word's padding), with its fix line."""
    lines = report.splitlines()
    for index, line in enumerate(lines):
        if re.match(rf"\s+\S+\s+{re.escape(label)}\s\s", line):
            fix = lines[index + 1] if index + 1 < len(lines) and "fix:" in lines[index + 1] else ""
            return (line + "\n" + fix).strip()
    raise AssertionError(f"no {label!r} line in:\n{report}")


def test_runtime_dependencies_checked_are_those_of_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {requirement.split(">")[0].split("<")[0].split("=")[0].strip() for requirement in declared}
    assert set(RUNTIME_DEPENDENCIES) == names


def test_a_python_older_than_3_11_fails_with_the_fix() -> None:
    # Only an old interpreter can show this end to end, and the bridge itself does not import on
    # one; the check is called with the version it would see there.
    check = check_python((3, 10, 14))
    assert check.status == "fail"
    assert "3.10.14" in check.summary and "3.11" in check.summary
    assert check.fix == "install Python >= 3.11 and reinstall the bridge with it"
    assert check_python((3, 11, 0)).status == "ok"


def test_doctor_lists_each_agent_with_its_protocol_version_and_what_it_delegates(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    _, checks = machine.doctor_json("--scripted-model")
    agents = {entry["name"]: entry for entry in checks["agents"]["data"]["agents"]}
    assert agents["pi"]["found"] is True and agents["pi"]["version"] == "1.6.0"
    assert (agents["pi"]["protocol"], agents["pi"]["delegates"]) == ("pi", ["fs", "terminal", "permissions"])
    gemini = agents["gemini"]
    assert gemini["found"] is False and gemini["version"] is None, "not on this machine's PATH"
    assert (gemini["protocol"], gemini["delegates"]) == ("acp", ["fs", "permissions"])
    assert agents["claude-acp"]["delegates"] == ["permissions"] and agents["pi-acp"]["delegates"] == []
    assert checks["agents"]["status"] == "ok"
    assert "pi (pi, 1.6.0, delegates fs+terminal+permissions)" in checks["agents"]["summary"]


@requires_pi
def test_doctor_with_everything_and_the_scripted_model_is_all_ok(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    code, report = machine.doctor("--scripted-model", "doctor")
    assert code == 0, report
    assert "All set" in report
    for label in ("Python", "dependencies", "Node", "pi", "pi models", "API keys"):
        assert _line(report, label).split()[0] == "ok", report
    assert "models from fake" in _line(report, "pi models")


@requires_pi
def test_doctor_checks_the_scripted_model_when_pi_bridge_scripted_model_is_1(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    machine.env["PI_BRIDGE_SCRIPTED_MODEL"] = "1"
    code, checks = machine.doctor_json()
    assert code == 0
    assert checks["models"]["data"]["agentDir"] == "the built-in scripted model"


def test_doctor_without_python_dependencies_names_each_and_the_pip_command(
    machine: Machine, tmp_path: Path
) -> None:
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    code, report = machine.doctor("doctor", python=python)
    assert code == 1
    deps = _line(report, "dependencies")
    assert deps.startswith("FAIL")
    for name in RUNTIME_DEPENDENCIES:
        assert name in deps
    assert f"fix: {python} -m pip install " in deps
    assert _line(report, "agent").startswith("skip"), "the agent's own checks need the dependencies"
    code, checks = machine.doctor_json(python=python)
    assert code == 1
    assert checks["dependencies"]["data"]["missing"] == list(RUNTIME_DEPENDENCIES)


@requires_pi
def test_doctor_without_node_says_to_install_node(machine: Machine) -> None:
    machine.link("pi")
    code, report = machine.doctor("--scripted-model", "doctor")
    assert code == 1
    node = _line(report, "Node")
    assert node.startswith("FAIL  Node") and "node not found on PATH" in node
    assert "fix: install Node >= 22.19" in node
    assert "fix: fix Node first" in _line(report, "pi")


def test_doctor_with_too_old_node_names_both_versions(machine: Machine) -> None:
    machine.fake("node", 'if [ "$1" = --version ]; then echo v20.11.1; exit 0; fi\nexit 1\n')
    code, checks = machine.doctor_json("--scripted-model")
    assert code == 1
    assert checks["node"]["status"] == "fail"
    assert "20.11.1" in checks["node"]["summary"] and "22.19.0" in checks["node"]["summary"]
    assert checks["node"]["fix"].startswith("install Node >= 22.19")


@requires_pi
def test_doctor_without_pi_gives_the_npm_command(machine: Machine) -> None:
    machine.link("node")
    code, report = machine.doctor("--scripted-model", "doctor")
    assert code == 1
    pi = _line(report, "pi")
    assert pi.startswith("FAIL") and "pi not found (PATH)" in pi
    assert "fix: npm install -g @earendil-works/pi-coding-agent" in pi
    assert _line(report, "pi models").startswith("skip")
    _code, checks = machine.doctor_json("--scripted-model")
    assert checks["pi"]["data"]["installCommand"] == "npm install -g @earendil-works/pi-coding-agent@latest"
    assert checks["pi"]["data"]["docsUrl"].startswith("https://")


@requires_pi
def test_doctor_with_too_old_pi_from_pi_bridge_pi_command_says_to_upgrade(machine: Machine) -> None:
    machine.link("node")
    old_pi = machine.fake("old-pi", "echo 0.73.1 >&2\n")
    machine.env["PI_BRIDGE_PI_COMMAND"] = str(old_pi)
    code, checks = machine.doctor_json("--scripted-model")
    assert code == 1
    pi = checks["pi"]
    assert pi["status"] == "fail" and pi["data"]["source"] == "PI_BRIDGE_PI_COMMAND"
    assert "0.73.1" in pi["summary"] and "1.6.0" in pi["summary"]
    assert pi["fix"] == "npm install -g @earendil-works/pi-coding-agent@latest"


@requires_pi
def test_doctor_lists_key_variable_names_and_never_their_values(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    machine.env["ANTHROPIC_API_KEY"] = SECRET
    code, report = machine.doctor("doctor")
    assert code == 0, report
    assert "set: ANTHROPIC_API_KEY" in _line(report, "API keys")
    assert "anthropic" in _line(report, "pi models")
    code_json, out = machine.doctor("doctor", "--json")
    assert code_json == 0
    assert SECRET not in report and SECRET not in out
    assert SECRET[:12] not in report + out


@requires_pi
def test_doctor_without_keys_or_models_fails_on_models_with_the_key_fix(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    code, report = machine.doctor("doctor")
    assert code == 1
    models = _line(report, "pi models")
    assert models.startswith("FAIL") and "pi has no model it can use" in models
    assert "fix: export ANTHROPIC_API_KEY=..." in models
    keys = _line(report, "API keys")
    assert keys.startswith("warn") and "no provider key variable is set" in keys


@requires_pi
def test_doctor_reads_the_users_agent_dir_and_writes_nothing_to_home(machine: Machine) -> None:
    machine.link("node")
    machine.link("pi")
    agent_dir = machine.home / ".pi" / "agent"
    write_pi_agent_dir(agent_dir, "http://127.0.0.1:9/v1", provider="mine")
    before = sorted(str(path) for path in machine.home.rglob("*"))
    code, checks = machine.doctor_json()
    assert checks["models"]["status"] == "ok", checks["models"]
    assert "mine" in checks["models"]["data"]["providers"]
    assert checks["models"]["data"]["agentDir"] == str(agent_dir)
    assert sorted(str(path) for path in machine.home.rglob("*")) == before
    assert checks["apiKeys"]["status"] == "warn"
    assert code == 0


def test_doctor_is_listed_in_the_help(machine: Machine) -> None:
    code, out = machine.doctor("--help")
    assert code == 0 and "doctor" in out


@requires_claude
def test_doctor_for_claude_checks_its_cli_version_binary_and_names_its_keys(machine: Machine) -> None:
    (machine.bin / "claude").symlink_to(CLAUDE_BIN)
    machine.env["ANTHROPIC_API_KEY"] = "sk-claude-secret-value"
    code, checks = machine.doctor_json("--agent", "claude")
    assert code == 0, checks
    assert checks["claude"]["status"] == "ok" and checks["claude"]["data"]["version"] == "2.1.197"
    assert checks["claudeBinary"]["status"] == "ok" and checks["claudeBinary"]["data"]["native"] is True
    assert checks["claudeKeys"]["data"]["set"] == ["ANTHROPIC_API_KEY"]
    _, out = machine.doctor("doctor", "--agent", "claude")
    assert "ANTHROPIC_API_KEY" in out and "sk-claude-secret-value" not in out


def test_doctor_for_claude_without_its_cli_gives_the_npm_command(machine: Machine) -> None:
    code, checks = machine.doctor_json("--agent", "claude")
    assert code == 1
    assert (
        checks["claude"]["status"] == "fail"
        and "npm install -g @anthropic-ai/claude-code" in checks["claude"]["fix"]
    )
    assert checks["claudeBinary"]["status"] == "skip"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed here")
def test_doctor_checks_bubblewrap_and_its_namespaces(machine: Machine) -> None:
    code, checks = machine.doctor_json()
    assert checks["sandbox"]["status"] == "warn", checks["sandbox"]
    assert "not on PATH" in checks["sandbox"]["summary"]
    assert "apt-get install bubblewrap" in checks["sandbox"]["fix"]
    machine.link("bwrap")
    code, checks = machine.doctor_json()
    assert checks["sandbox"]["status"] == "ok", checks["sandbox"]
    assert checks["sandbox"]["data"]["available"] is True
    (machine.bin / "bwrap").unlink()  # the link, not what it points to, is replaced
    machine.fake("bwrap", "echo 'bwrap: No permissions to creating new namespace' >&2; exit 1\n")
    code, checks = machine.doctor_json()
    assert checks["sandbox"]["status"] == "warn", checks["sandbox"]
    assert "cannot create its namespaces: bwrap: No permissions" in checks["sandbox"]["summary"]
    assert "unprivileged_userns" in checks["sandbox"]["fix"]
