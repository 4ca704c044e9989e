"""The permission modes (contract, turn 3) as ACP session modes and as the session config option
of category `mode`: one table, both shapes, and the updates that keep a client's view in sync.

The gate holds each conversation's mode (bridge/policy/gate.py); this module only names the modes
for ACP and reads a client's choice of one. A change by `session/set_mode` is told as
`current_mode_update` and `config_option_update`, one by `session/set_config_option` as
`current_mode_update` (its answer carries the options), so a client that shows either sees it.
"""

from __future__ import annotations

from typing import Final

from acp import schema

from bridge.contract import PermissionMode

MODE_OPTION: Final = "mode"
#: id -> (name, description), in the order a client lists them.
MODES: Final[dict[PermissionMode, tuple[str, str]]] = {
    "ask": ("Ask", "Read-only tools run; edits, writes and shell commands ask first"),
    "auto-edit": (
        "Auto-edit",
        "Read-only tools and edits inside the working directory run; shell commands and other files ask",
    ),
    "plan": ("Plan", "Read-only: everything else is refused without asking"),
    "full": ("Full access", "Every tool runs without asking"),
}


def mode_of(value: object) -> PermissionMode | None:
    """The mode a client's `modeId` or option value names; None for anything else."""
    return next((mode for mode in MODES if mode == value), None)


def mode_state(current: PermissionMode) -> schema.SessionModeState:
    """`modes` of session/new and session/load."""
    return schema.SessionModeState(
        current_mode_id=current,
        available_modes=[
            schema.SessionMode(id=mode, name=name, description=description)
            for mode, (name, description) in MODES.items()
        ],
    )


def mode_option(current: PermissionMode) -> schema.SessionConfigOptionSelect:
    """The config option of category `mode`."""
    return schema.SessionConfigOptionSelect(
        type="select",
        id=MODE_OPTION,
        name="Mode",
        category="mode",
        description="When the agent asks before it acts",
        current_value=current,
        options=[
            schema.SessionConfigSelectOption(value=mode, name=name, description=description)
            for mode, (name, description) in MODES.items()
        ],
    )


def current_mode_update(mode: PermissionMode) -> schema.CurrentModeUpdate:
    """The session update that tells the client the mode is now `mode`."""
    return schema.CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode)
