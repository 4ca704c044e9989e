"""The agent CLIs the bridge can drive, by name: build an adapter, find its command and version."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the index imports only the standard library: the doctor needs it so
    from bridge.agents.checks import Check
    from bridge.agents.seam import AgentAdapter
    from bridge.contract import AgentInfo

DEFAULT_AGENT: Final = "pi"
_PACKAGE_SEARCH_DEPTH: Final = 6


def _pi(settings: Mapping[str, Any]) -> AgentAdapter:
    from bridge.agents.pi import PiAgent

    return PiAgent()


def _claude(settings: Mapping[str, Any]) -> AgentAdapter:
    from bridge.agents.claude import ClaudeAgent

    try:
        return ClaudeAgent.from_settings(settings.get("permission_mode"), settings.get("allowed_tools") or ())
    except ValueError as exc:
        raise UnknownAgentError(str(exc)) from None


def _codex(settings: Mapping[str, Any]) -> AgentAdapter:
    from bridge.agents.codex import CodexAgent

    return CodexAgent()


def _acp(name: str) -> Callable[[Mapping[str, Any]], AgentAdapter]:
    def build(settings: Mapping[str, Any]) -> AgentAdapter:
        from bridge.agents import acp

        return acp.build(name)

    return build


#: The ACP agents (bridge/agents/acp/catalog.py), by name: kept here as names only, so that the
#: index imports no adapter package until one is built.
ACP_AGENTS: Final = ("pi-acp", "claude-acp", "opencode", "gemini")

#: How the bridge speaks to each known agent, and what the agent hands to it (docs/agents.md):
#: pi's extension hands over its file tools, its commands and its tool checks; Claude Code and
#: Codex ask before their tools; of the ACP agents, Gemini CLI also hands over its writes.
KINDS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "pi": ("pi", ("fs", "terminal", "permissions")),
    "claude": ("claude", ("permissions",)),
    "codex": ("codex", ("permissions",)),
    "pi-acp": ("acp", ()),
    "claude-acp": ("acp", ("permissions",)),
    "opencode": ("acp", ("permissions",)),
    "gemini": ("acp", ("fs", "permissions")),
}

FACTORIES: Final[dict[str, Callable[[Mapping[str, Any]], AgentAdapter]]] = {
    "pi": _pi,
    "claude": _claude,
    "codex": _codex,
    **{name: _acp(name) for name in ACP_AGENTS},
}


def _pi_doctor(
    command: tuple[str, ...], source: str, environ: Mapping[str, str], scripted_model: bool
) -> list[Check]:
    from bridge.agents.pi import doctor

    return doctor.checks(command, source, environ, scripted_model)


#: Each agent's own `pi-bridge doctor` checks (its runtime, command, version, configuration).
def _claude_doctor(
    command: tuple[str, ...], source: str, environ: Mapping[str, str], scripted_model: bool
) -> list[Check]:
    from bridge.agents.claude import doctor

    return doctor.checks(command, source, environ, scripted_model)


DOCTORS: Final[dict[str, Callable[[tuple[str, ...], str, Mapping[str, str], bool], list[Check]]]] = {
    "pi": _pi_doctor,
    "claude": _claude_doctor,
}


def doctor_checks(
    name: str, command: tuple[str, ...], source: str, environ: Mapping[str, str], scripted_model: bool
) -> list[Check]:
    """Agent `name`'s doctor checks of `command` (found through `source`); none if it has none."""
    doctor = DOCTORS.get(name)
    return doctor(command, source, environ, scripted_model) if doctor else []


class UnknownAgentError(ValueError):
    """No such agent, or a setting of it that cannot be used."""


def agent_names() -> list[str]:
    """The names of the agents the bridge knows, the default first."""
    return sorted(FACTORIES, key=lambda name: (name != DEFAULT_AGENT, name))


#: The known agent that speaks each protocol of `initializationOptions.agents` (object form).
PROTOCOL_AGENTS: Final = {"pi": "pi", "claude": "claude", "codex": "codex"}


def build_adapter(name: str, settings: Mapping[str, Any] | None = None) -> AgentAdapter:
    """The adapter of agent `name`; raises UnknownAgentError.

    settings: `permission_mode` and `allowed_tools`, for agents with a permission system;
    `protocol` and `command` for an agent configured by the object form (any name).
    """
    settings = settings or {}
    protocol = settings.get("protocol")
    factory = FACTORIES.get(name)
    if protocol is None or (factory is not None and KINDS[name][0] == protocol):
        if factory is None:
            raise UnknownAgentError(
                f"unknown agent {name!r}; known: {', '.join(agent_names())} "
                f"(another needs a protocol in initializationOptions.agents.{name})"
            )
        return factory(settings)
    if protocol == "acp":
        from bridge.agents import acp

        return acp.build_custom(name, tuple(settings.get("command") or (name,)))
    known = PROTOCOL_AGENTS.get(protocol)
    if known is None:
        raise UnknownAgentError(f"initializationOptions.agents.{name}.protocol: no protocol {protocol!r}")
    adapter = FACTORIES[known](settings)
    adapter.name = name  # its conversations, sessions and listings are under the configured name
    return adapter


def default_command(adapter: AgentAdapter) -> tuple[str, ...]:
    """How to run an agent when nothing configures it: its executable on PATH."""
    return adapter.default_command


def probe(
    name: str, command: tuple[str, ...], env: Mapping[str, str] | None = None, protocol_of: str | None = None
) -> AgentInfo:
    """Whether an agent's command is found, and its version, without running it.

    The version is read from the npm package that provides the executable (both agents install
    from npm); it is None for a command that is no npm package's bin (a wrapper, a test fake).
    """
    from bridge.contract import AgentInfo

    merged = {**os.environ, **(env or {})}
    executable = shutil.which(command[0], path=merged.get("PATH")) if command else None
    known, delegates = KINDS.get(name, (None, ()))
    protocol = protocol_of or known
    if protocol != known:  # configured to speak another protocol: its known speaker's delegation
        delegates = KINDS[PROTOCOL_AGENTS[protocol]][1] if protocol in PROTOCOL_AGENTS else ()
    return AgentInfo.model_validate(
        {
            "name": name,
            "command": list(command),
            "found": executable is not None,
            "version": _npm_version(executable),
            "protocol": protocol,
            "delegates": list(delegates),
        }
    )


def _npm_version(executable: str | None) -> str | None:
    if executable is None:
        return None
    real = Path(os.path.realpath(executable))
    folder = real.parent
    for _ in range(_PACKAGE_SEARCH_DEPTH):
        manifest = folder / "package.json"
        if manifest.is_file():
            try:
                package = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            bins = package.get("bin") if isinstance(package, dict) else None
            targets = bins.values() if isinstance(bins, dict) else [bins] if isinstance(bins, str) else []
            if any(isinstance(t, str) and (folder / t).resolve() == real for t in targets):
                version = package.get("version")
                return version if isinstance(version, str) else None
            return None
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def pi_login(provider: str, pi_command: str | None) -> int:
    """Run pi's own login in this terminal (the ACP `pi-login` auth method); its exit status."""
    from bridge.agents.pi.login import login_main

    return login_main(provider, pi_command)
