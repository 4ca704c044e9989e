"""ACP's side of the conversation toolbox: `available_commands_update`, sent when a session's
list of `/` commands is new or has changed."""

from __future__ import annotations

import logging
from collections.abc import Callable

from acp import schema

from bridge.contract import CommandInfo
from bridge.fronts.acp.updates import Update
from bridge.runs.conversation_admin import ConversationAdmin, ConversationAdminError

log = logging.getLogger(__name__)

#: What a session's update lists, to tell a change from the same list again.
Listing = tuple[tuple[str, str, str | None], ...]
#: Sends one session/update of a session.
SendUpdate = Callable[[str, Update], None]


def commands_update(commands: list[CommandInfo]) -> schema.AvailableCommandsUpdate:
    """The ACP update listing `commands` (each with its argument hint as unstructured input)."""
    return schema.AvailableCommandsUpdate(
        session_update="available_commands_update",
        available_commands=[
            schema.AvailableCommand(
                name=command.name,
                description=command.description or f"/{command.name}",
                input=schema.AvailableCommandInput(
                    root=schema.UnstructuredCommandInput(hint=command.argument_hint)
                )
                if command.argument_hint
                else None,
                field_meta={"piBridge": {"source": command.source}},
            )
            for command in commands
        ],
    )


class CommandAnnouncer:
    """Tells each session's client its commands: after session/new, load and resume, and after
    each prompt (an extension may have added some), only when the list changed."""

    def __init__(self, admin: ConversationAdmin, send: SendUpdate) -> None:
        self._admin = admin
        self._send = send
        self._sent: dict[str, Listing] = {}

    async def announce(self, session_id: str, cwd: str) -> None:
        """Ask the session's agent for its commands; send the update if the list is new."""
        try:
            listed = await self._admin.commands(session_id, cwd)
        except ConversationAdminError as exc:
            log.info("session %s: no commands to announce: %s", session_id, exc)
            return
        commands = [command for command in listed.commands if command.name != "new"]
        listing = tuple((c.name, c.description, c.argument_hint) for c in commands)
        if self._sent.get(session_id) == listing:
            return
        self._sent[session_id] = listing
        self._send(session_id, commands_update(commands))

    def forget(self, session_id: str) -> None:
        """The session is closed or deleted: a later one of that id is told its list again."""
        self._sent.pop(session_id, None)
