"""`pi-bridge doctor`: check that a run could work here and say how to fix what is missing.

Checks, in order: the Python running the bridge, the bridge's dependencies (importable, with
versions), Node, pi (the same command the server would run) and its version, whether pi's model
configuration answers, and which provider API-key variables are set (names only, never values).
A readable report or JSON; the exit status is 1 when a run could not work, else 0.

Only the standard library is imported at module level: the doctor must run, and say so, when the
bridge's own dependencies are missing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

MIN_PYTHON = (3, 11)
# The distributions of pyproject.toml's [project] dependencies, by the module each one provides
# (tests/unit/test_doctor.py keeps the two in step).
RUNTIME_DEPENDENCIES: dict[str, str] = {
    "pygls": "pygls",
    "lsprotocol": "lsprotocol",
    "anyio": "anyio",
    "pydantic": "pydantic",
    "orjson": "orjson",
    "psutil": "psutil",
}
PROBE_TIMEOUT_SECONDS = 30

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass
class Check:
    """One line of the report: what was checked, how it went, and the fix when it did not."""

    name: str
    label: str
    status: Status
    summary: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Every check of one doctor run."""

    checks: list[Check]

    @property
    def ok(self) -> bool:
        """Whether a run could work: no check failed."""
        return all(check.status != "fail" for check in self.checks)

    def to_json(self) -> dict[str, Any]:
        """The report as the JSON `--json` prints."""
        return {"ok": self.ok, "checks": [asdict(check) for check in self.checks]}


@dataclass
class _Probe:
    code: int | None
    output: str


def _run(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> _Probe:
    """Run argv without a shell; its exit code (None: could not start) and stdout+stderr."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _Probe(None, str(exc))
    return _Probe(done.returncode, (done.stdout + "\n" + done.stderr).strip())


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _which(name: str, environ: Mapping[str, str]) -> str | None:
    """Where `name` resolves on environ's PATH, as a spawn from the bridge would find it."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) and not os.path.isdir(name) else None
    return shutil.which(name, path=environ.get("PATH", os.defpath))


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    """The Python running the bridge is recent enough."""
    text = ".".join(str(part) for part in version)
    data = {"version": text, "executable": sys.executable}
    if version[:2] < MIN_PYTHON:
        return Check(
            "python",
            "Python",
            "fail",
            f"{text} ({sys.executable}) is older than the {MIN_PYTHON[0]}.{MIN_PYTHON[1]} the bridge needs",
            "install Python >= 3.11 and reinstall the bridge with it",
            data,
        )
    return Check("python", "Python", "ok", f"{text} ({sys.executable})", data=data)


def check_dependencies() -> Check:
    """Each of the bridge's runtime dependencies imports, and which version is installed."""
    versions: dict[str, str] = {}
    missing: list[str] = []
    for distribution, module in RUNTIME_DEPENDENCIES.items():
        try:
            importlib.import_module(module)
            versions[distribution] = importlib.metadata.version(distribution)
        except (ImportError, importlib.metadata.PackageNotFoundError):
            missing.append(distribution)
    data: dict[str, Any] = {"versions": versions, "missing": missing}
    if missing:
        return Check(
            "dependencies",
            "dependencies",
            "fail",
            "missing: " + ", ".join(missing),
            f"{sys.executable} -m pip install " + " ".join(_requirement(name) for name in missing),
            data,
        )
    summary = ", ".join(f"{name} {version}" for name, version in versions.items())
    return Check("dependencies", "dependencies", "ok", summary, data=data)


def _requirement(distribution: str) -> str:
    """The quoted requirement of `distribution` as the installed bridge declares it, else its name."""
    try:
        declared = importlib.metadata.requires("pi-bridge") or []
    except importlib.metadata.PackageNotFoundError:
        declared = []
    for requirement in declared:
        name = requirement.split(";")[0]
        bare = name.split("<")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        if bare.lower() == distribution.lower() and "extra ==" not in requirement:
            return f"'{name.strip()}'"
    return distribution


def check_node(environ: Mapping[str, str]) -> Check:
    """Node is on PATH and at least the version pi needs."""
    from bridge.pi.requirements import NODE_INSTALL_HINT, NODE_MIN_VERSION, format_version, parse_version

    node = _which("node", environ)
    if node is None:
        return Check("node", "Node", "fail", "node not found on PATH", NODE_INSTALL_HINT)
    probe = _run([node, "--version"], environ, tempfile.gettempdir())
    version = parse_version(probe.output) if probe.code == 0 else None
    if version is None:
        return Check(
            "node",
            "Node",
            "fail",
            f"{node} --version failed: {_last_line(probe.output)}",
            NODE_INSTALL_HINT,
            {"path": node},
        )
    data = {"path": node, "version": format_version(version)}
    if version < NODE_MIN_VERSION:
        return Check(
            "node",
            "Node",
            "fail",
            f"{format_version(version)} ({node}) is older than the "
            f"{format_version(NODE_MIN_VERSION)} pi needs",
            NODE_INSTALL_HINT,
            data,
        )
    return Check("node", "Node", "ok", f"{format_version(version)} ({node})", data=data)


def check_pi(command: tuple[str, ...], source: str, environ: Mapping[str, str], node_ok: bool) -> Check:
    """pi is where the server would look for it, starts, and is at least the tested version.

    `pi --version` writes auth.json and a sessions folder into its agent dir: it runs with a
    throwaway agent dir (AGENT_DIR_ENV) so the doctor never writes into the user's.
    """
    from bridge.pi.requirements import (
        AGENT_DIR_ENV,
        OFFLINE_ENV,
        PI_DOCS_URL,
        PI_INSTALL_COMMAND,
        PI_MIN_VERSION,
        format_version,
        parse_version,
    )

    shown = " ".join(command)
    exe = _which(command[0], environ) if command else None
    # What an editor needs to offer the install itself (VS Code's "Install pi" / "Open Docs").
    data: dict[str, Any] = {
        "command": list(command),
        "source": source,
        "installCommand": f"{PI_INSTALL_COMMAND}@latest",
        "docsUrl": PI_DOCS_URL,
    }
    if exe is None:
        return Check(
            "pi",
            "pi",
            "fail",
            f"{command[0] if command else '(empty command)'} not found ({source})",
            f"{PI_INSTALL_COMMAND}   (or point --pi-command / PI_BRIDGE_PI_COMMAND at it)",
            data,
        )
    data["path"] = exe
    with tempfile.TemporaryDirectory(prefix="pi-bridge-doctor-") as scratch:
        env = {**environ, **OFFLINE_ENV, AGENT_DIR_ENV: scratch}
        probe = _run([exe, *command[1:], "--version"], env, scratch)
    version = parse_version(_last_line(probe.output)) if probe.code == 0 else None
    if version is None:
        return Check(
            "pi",
            "pi",
            "fail",
            f"`{shown} --version` failed (exit {probe.code}): {_last_line(probe.output)}",
            "fix Node first (see above)" if not node_ok else f"reinstall pi: {PI_INSTALL_COMMAND}",
            data,
        )
    data["version"] = format_version(version)
    if version < PI_MIN_VERSION:
        return Check(
            "pi",
            "pi",
            "fail",
            f"{format_version(version)} ({exe}) is older than {format_version(PI_MIN_VERSION)}, "
            "the oldest pi the bridge is tested with",
            f"{PI_INSTALL_COMMAND}@latest",
            data,
        )
    return Check("pi", "pi", "ok", f"{format_version(version)} ({exe}, from {source})", data=data)


def user_agent_dir(environ: Mapping[str, str]) -> Path:
    """pi's agent dir for this environment: its AGENT_DIR_ENV variable, else its default dir."""
    from bridge.pi.requirements import AGENT_DIR_ENV, DEFAULT_AGENT_DIR

    configured = environ.get(AGENT_DIR_ENV)
    if configured:
        return Path(configured)
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / DEFAULT_AGENT_DIR.removeprefix("~/")


def _model_rows(listing: str) -> list[tuple[str, str]]:
    """(provider, model) of each row of `pi --list-models`' table: the lines after its header."""
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in listing.splitlines():
        words = line.split()
        if words[:2] == ["provider", "model"]:
            in_table = True
        elif in_table and len(words) >= 2 and not line[0].isspace():
            rows.append((words[0], words[1]))
        elif in_table:
            in_table = False
    return rows


def check_models(command: tuple[str, ...], environ: Mapping[str, str], scripted_model: bool) -> Check:
    """pi's model configuration answers: `pi --list-models` names at least one usable model.

    It reads a copy of the user's models.json, settings.json and auth.json in a throwaway agent
    dir, so the user's configuration (and keys in the environment) count, and nothing is written
    to the user's agent dir. With --scripted-model the bridge's own configuration is checked.
    """
    from bridge.pi.requirements import (
        AGENT_DIR_ENV,
        MODEL_CONFIG_FILES,
        OFFLINE_ENV,
        PROVIDER_KEY_VARIABLES,
    )

    source = user_agent_dir(environ)
    with tempfile.TemporaryDirectory(prefix="pi-bridge-doctor-") as scratch:
        if scripted_model:
            from bridge.scripted_model import write_pi_agent_dir

            # --list-models only reads the configuration; no model server needs to listen.
            write_pi_agent_dir(Path(scratch), "http://127.0.0.1:9/v1", provider="fake")
            where = "the built-in scripted model"
        else:
            for name in MODEL_CONFIG_FILES:
                if (source / name).is_file():
                    shutil.copyfile(source / name, Path(scratch) / name)
                    os.chmod(Path(scratch) / name, 0o600)
            where = str(source)
        env = {**environ, **OFFLINE_ENV, AGENT_DIR_ENV: scratch}
        probe = _run([*command, "--list-models"], env, scratch)
    rows = _model_rows(probe.output)
    providers = sorted({provider for provider, _model in rows})
    data: dict[str, Any] = {"agentDir": where, "models": len(rows), "providers": providers}
    if probe.code != 0 or not rows:
        key_example = PROVIDER_KEY_VARIABLES[0]
        return Check(
            "models",
            "pi models",
            "fail",
            f"pi has no model it can use (configuration: {where})"
            if probe.code == 0
            else f"`pi --list-models` failed (exit {probe.code}): {_last_line(probe.output)}",
            f"export {key_example}=... (or another provider's key), or add a provider to "
            f"{source}/models.json (pi's docs/models.md); to try without a key: pi-bridge --scripted-model",
            data,
        )
    return Check(
        "models",
        "pi models",
        "ok",
        f"{len(rows)} models from {', '.join(providers)} ({where})",
        data=data,
    )


def check_api_keys(environ: Mapping[str, str], scripted_model: bool) -> Check:
    """Which provider API-key variables are set: names only, never values."""
    from bridge.pi.requirements import PROVIDER_KEY_VARIABLES

    names = [name for name in PROVIDER_KEY_VARIABLES if environ.get(name)]
    data: dict[str, Any] = {"set": names}
    if names:
        return Check("apiKeys", "API keys", "ok", "set: " + ", ".join(names), data=data)
    if scripted_model:
        return Check("apiKeys", "API keys", "ok", "none set (not needed with the scripted model)", data=data)
    return Check(
        "apiKeys",
        "API keys",
        "warn",
        "no provider key variable is set (fine if pi's auth.json or models.json holds the key)",
        f"export {PROVIDER_KEY_VARIABLES[0]}=... (or another provider's key variable)",
        data,
    )


def run_checks(
    environ: Mapping[str, str] | None = None,
    pi_command: str | None = None,
    scripted_model: bool = False,
) -> Report:
    """Every check, in order; later checks are skipped when what they need is missing."""
    env = dict(os.environ if environ is None else environ)
    checks = [check_python(), check_dependencies()]
    if checks[-1].status == "fail":
        reason = "skipped: needs the bridge's dependencies"
        for name, label in (("node", "Node"), ("pi", "pi"), ("models", "pi models"), ("apiKeys", "API keys")):
            checks.append(Check(name, label, "skip", reason))
        return Report(checks)

    from bridge.config import COMMAND_ENV, command_from

    command = command_from(pi_command, env)
    source = "--pi-command" if pi_command else (COMMAND_ENV if env.get(COMMAND_ENV, "").strip() else "PATH")
    node = check_node(env)
    pi = check_pi(command, source, env, node_ok=node.status == "ok")
    checks += [node, pi]
    if pi.status == "ok":
        checks.append(check_models((pi.data["path"], *command[1:]), env, scripted_model))
    else:
        checks.append(Check("models", "pi models", "skip", "skipped: needs a working pi"))
    checks.append(check_api_keys(env, scripted_model))
    return Report(checks)


def render_text(report: Report) -> str:
    """The readable report: one line per check, its fix indented below, a verdict at the end."""
    width = max(len(check.label) for check in report.checks)
    lines = ["pi-bridge doctor"]
    for check in report.checks:
        status = "FAIL" if check.status == "fail" else check.status
        lines.append(f"  {status:<4}  {check.label:<{width}}  {check.summary}")
        if check.fix and check.status in ("fail", "warn"):
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {check.fix}")
    problems = sum(check.status == "fail" for check in report.checks)
    if problems:
        lines.append(f"{problems} problem{'s' if problems > 1 else ''}: a run could not work until fixed.")
    else:
        lines.append("All set: a run can work.")
    return "\n".join(lines)


def doctor_main(pi_command: str | None, scripted_model: bool, as_json: bool) -> int:
    """Print the report (text or JSON) to stdout; 1 when a run could not work, else 0."""
    report = run_checks(pi_command=pi_command, scripted_model=scripted_model)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_text(report))
    return 0 if report.ok else 1
