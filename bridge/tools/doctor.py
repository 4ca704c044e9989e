"""`pi-bridge doctor`: check that a run could work here and say how to fix what is missing."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bridge.agents.checks import Check

MIN_PYTHON = (3, 11)
# The distributions of pyproject.toml's [project] dependencies, by the module each one provides
# (tests/e2e/test_doctor.py keeps the two in step).
RUNTIME_DEPENDENCIES: dict[str, str] = {
    "pygls": "pygls",
    "lsprotocol": "lsprotocol",
    "anyio": "anyio",
    "pydantic": "pydantic",
    "orjson": "orjson",
    "psutil": "psutil",
    "agent-client-protocol": "acp",
    "bashlex": "bashlex",
}


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


def check_sandbox(environ: Mapping[str, str]) -> Check:
    """bubblewrap is on PATH and can create its namespaces: runs may ask for a sandbox.

    A warning, not a failure: runs without a sandbox work, and one that asks for it is refused.
    """
    from bridge.process import bwrap

    found = bwrap.probe(environ.get("PATH", os.defpath))
    if not found.ok:
        summary = f"{found.reason}: a run that asks for a sandbox is refused"
        return Check("sandbox", "sandbox", "warn", summary, found.fix, {"available": False})
    data = {"available": True, "kind": "bwrap", "path": found.path}
    return Check("sandbox", "sandbox", "ok", f"bubblewrap ({found.path}) creates its namespaces", data=data)


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


def check_checkpoints(env: Mapping[str, str]) -> Check:
    """Checkpoints (pi/checkpoints, pi/rewind) need git on PATH; without it they are off."""
    from bridge.checkpoints.shadow_git import find_git

    git = find_git(env.get("PATH"))
    if git is None:
        return Check(
            "checkpoints",
            "checkpoints",
            "warn",
            "off: git is not on PATH (runs work; nothing can be rewound)",
            fix="install git (Debian/Ubuntu: apt-get install git; Fedora: dnf install git)",
        )
    return Check(
        "checkpoints", "checkpoints", "ok", f"on: a snapshot before every prompt ({git})", data={"git": git}
    )


def check_project_trust(env: Mapping[str, str], cwd: str) -> Check:
    """The saved project-trust decision of the current folder (policy/trust/project_trust.py): whether its
    own agent settings and extensions load, or whether its first prompt will ask."""
    from bridge.policy.rule_store import state_dir
    from bridge.policy.trust.trust_store import TrustStore

    folder = os.path.realpath(cwd)
    decision = TrustStore(state_dir(env)).get(folder)
    summary = {
        "trusted": "this folder is trusted: its agent settings and extensions load",
        "untrusted": "this folder is never trusted: its agent settings and extensions stay out",
        None: "no decision for this folder: its first prompt asks, if it has agent settings or extensions",
    }[decision]
    return Check(
        "projectTrust",
        "project trust",
        "ok",
        summary,
        fix="`pi-bridge trust` (or --never, --forget)",
        data={"cwd": folder, "decision": decision},
    )


def check_agents(env: Mapping[str, str]) -> Check:
    """Every agent a run can name: its protocol, whether its executable is found on PATH, its
    version, and what it hands to the bridge (fs, terminal, permissions). Informational: an agent
    not installed is only a run that names it failing."""
    from bridge.agents import agent_names, build_adapter, probe

    infos = [probe(name, build_adapter(name).default_command, env) for name in agent_names()]
    found = [i.name for i in infos if i.found]
    summary = ", ".join(
        f"{i.name} ({i.protocol}, {i.version or 'version unknown'}, "
        f"delegates {'+'.join(i.delegates) or 'nothing'})"
        for i in infos
        if i.found
    )
    return Check(
        "agents",
        "agents",
        "ok",
        f"found: {summary}" if found else "none found on PATH",
        data={"agents": [i.model_dump(mode="json", by_alias=True) for i in infos]},
    )


def run_checks(
    environ: Mapping[str, str] | None = None,
    pi_command: str | None = None,
    scripted_model: bool = False,
    agent: str | None = None,
) -> Report:
    """Every check, in order; later checks are skipped when what they need is missing.

    The agent's own checks (its runtime, its command and version, its model configuration) come
    from its package through the adapter index (bridge/agents/__init__.py), which needs the dependencies.
    """
    env = dict(os.environ if environ is None else environ)
    checks = [check_python(), check_dependencies()]
    if checks[-1].status == "fail":
        checks.append(
            Check("agent", "agent", "skip", "skipped: the agent's own checks need the bridge's dependencies")
        )
        return Report(checks)
    checks.append(check_checkpoints(env))
    checks.append(check_sandbox(env))
    checks.append(check_agents(env))

    from bridge.agents import DEFAULT_AGENT, doctor_checks
    from bridge.config import COMMAND_ENV, command_from

    if agent is not None and agent != DEFAULT_AGENT:  # another agent runs its executable on PATH
        from bridge.agents import UnknownAgentError, build_adapter

        try:
            command = build_adapter(agent).default_command
        except UnknownAgentError as exc:
            return Report([*checks, Check("agent", "agent", "fail", str(exc))])
        agent_checks = doctor_checks(agent, command, "PATH", env, scripted_model)
        return Report([*checks, *agent_checks, check_project_trust(env, os.getcwd())])
    command = command_from(pi_command, env)
    source = "--pi-command" if pi_command else (COMMAND_ENV if env.get(COMMAND_ENV, "").strip() else "PATH")
    checks += doctor_checks(DEFAULT_AGENT, command, source, env, scripted_model)
    return Report([*checks, check_project_trust(env, os.getcwd())])


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


def doctor_main(pi_command: str | None, scripted_model: bool, as_json: bool, agent: str | None = None) -> int:
    """Print the report (text or JSON) to stdout; 1 when a run could not work, else 0."""
    report = run_checks(pi_command=pi_command, scripted_model=scripted_model, agent=agent)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_text(report))
    return 0 if report.ok else 1
