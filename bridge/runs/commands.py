"""The bridge's own `/` commands: which there are, and how a prompt names one."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final, get_args

from bridge.agents.values import AgentCommand, BridgeCommand, BridgeCommandName
from bridge.contract import MAX_TITLE, CommandInfo
from bridge.policy.rule_store import state_dir

BRIDGE_COMMANDS: Final = (
    CommandInfo(
        name="compact",
        description="Summarize the conversation so far to free its context (optional instructions)",
        source="bridge",
        argument_hint="[instructions]",
    ),
    CommandInfo(
        name="autocompact",
        description="Turn compaction on or off for when the context fills",
        source="bridge",
        argument_hint="on|off",
    ),
    CommandInfo(
        name="name", description="Give the conversation a title", source="bridge", argument_hint="<title>"
    ),
    CommandInfo(name="export", description="Export the conversation as an HTML file", source="bridge"),
    CommandInfo(name="new", description="Start a new conversation", source="bridge"),
)
_NAMES: Final = frozenset(get_args(BridgeCommandName))
# `/name` then its argument: the name ends at whitespace (a newline too) or the prompt's end.
_HEAD: Final = re.compile(r"/([a-z]+)(?:\s+(.*))?", re.DOTALL)


class CommandUsageError(ValueError):
    """A bridge command typed with an argument it cannot take."""


def bridge_command(prompt: str) -> BridgeCommand | None:
    """The bridge command a prompt names, or None (the prompt goes to the agent as typed).

    Raises CommandUsageError for a bridge command with a wrong argument.
    """
    match = _HEAD.fullmatch(prompt.strip())
    if match is None or match.group(1) not in _NAMES:
        return None
    name: BridgeCommandName = match.group(1)  # type: ignore[assignment]
    argument = (match.group(2) or "").strip()
    if name == "autocompact" and argument not in ("on", "off"):
        raise CommandUsageError("/autocompact takes `on` or `off`")
    if name == "name":
        argument = " ".join(argument.split())
        if not argument:
            raise CommandUsageError("/name takes the conversation's title: /name <title>")
        if len(argument) > MAX_TITLE:
            raise CommandUsageError(f"/name: a title has at most {MAX_TITLE} characters")
    if name in ("export", "new") and argument:
        raise CommandUsageError(f"/{name} takes no argument")
    return BridgeCommand(name=name, argument=argument)


def export_path(run_id: str) -> str:
    """Where `/export` of a run writes: the bridge's state dir (pi's default is the workspace)."""
    folder = state_dir(os.environ) / "exports"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return str(folder / f"{Path(run_id).name}.html")


def command_list(agent_commands: list[AgentCommand]) -> list[CommandInfo]:
    """The bridge's commands, then the agent's; an agent's command a bridge one shadows is left
    out (the bridge's runs when it is typed)."""
    listed = list(BRIDGE_COMMANDS)
    for command in agent_commands:
        if command.name in _NAMES:
            continue
        listed.append(
            CommandInfo(
                name=command.name,
                description=command.description,
                source=command.source,
                argument_hint=command.argument_hint,
            )
        )
    return listed
