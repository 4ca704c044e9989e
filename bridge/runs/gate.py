"""The permission gate of every conversation: its mode, the file the agent reads it from, and the
check that decides each tool call the agent asks about.

A conversation's mode is `initializationOptions.defaultMode` until `pi/setMode` or a run's
`mode` changes it, and holds from the next tool call. The agent's gate reads it from a small file
per conversation in the bridge's state dir, so a `full` conversation (no file: the default that
keeps today's behaviour) costs no round trip. Every other mode asks the bridge, and `decide`
(permissions.py) answers with the mode and the rules. Until a client can answer (a later step),
a call that would ask is refused with the contract's reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bridge.agents.seam import GATE_DIR_ENV, AskTool, ToolCheck, ToolVerdict
from bridge.contract import PermissionMode
from bridge.runs.permissions import ToolCall, decide
from bridge.runs.rule_store import RuleStore, RuleStoreError, state_dir

log = logging.getLogger(__name__)

MODES_DIR: Final = "modes"
#: A session id the board names a file by (anything else is never a file: the agent then asks).
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


class ModeBoard:
    """One directory of this bridge process, a file per conversation not in `full` mode."""

    def __init__(self, root: Path) -> None:
        #: The directory, unique to this bridge process; made (0700) with its first file.
        self.path = root / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._made = False

    def publish(self, session_id: str, mode: PermissionMode) -> None:
        """Write `mode` for `session_id` whole (temp file, then rename); `full` removes the file."""
        if not _SAFE_NAME.fullmatch(session_id):
            return
        target = self.path / session_id
        if mode == "full":
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            return
        if not self._made:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._made = True
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=".mode-")
        with os.fdopen(fd, "w") as handle:
            handle.write(mode)
        os.replace(temp, target)

    def remove(self) -> None:
        """Remove the directory (the bridge is done)."""
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            self._made = False


class Gate:
    """Every conversation's mode, and the permission check each run's tool calls go through."""

    def __init__(self, default_mode: PermissionMode = "full", root: Path | None = None) -> None:
        base = root if root is not None else state_dir(os.environ)
        self.default_mode: PermissionMode = default_mode
        self.rules = RuleStore(base)
        self.board = ModeBoard(base / MODES_DIR)
        self._modes: dict[str, PermissionMode] = {}

    def agent_env(self) -> dict[str, str]:
        """The environment that tells the agent's gate where the modes are."""
        return {GATE_DIR_ENV: str(self.board.path)}

    def mode_of(self, session_id: str | None) -> PermissionMode:
        """The mode of a conversation now."""
        if session_id is None:
            return self.default_mode
        return self._modes.get(session_id, self.default_mode)

    def set_mode(self, session_id: str, mode: PermissionMode) -> None:
        """The conversation's mode from its next tool call on."""
        self._modes[session_id] = mode
        self.board.publish(session_id, mode)

    def bind(self, session_id: str, mode: PermissionMode | None) -> None:
        """A run streams on conversation `session_id`: its `mode` (if it gave one) is the
        conversation's now, and the agent's gate sees the conversation's mode."""
        if mode is not None:
            self.set_mode(session_id, mode)
        else:
            self.board.publish(session_id, self.mode_of(session_id))

    def check(self, session_of: Callable[[], str | None], cwd: str) -> AskTool:
        """The permission check of one run in `cwd` (`session_of`: its conversation, once known)."""

        async def check(call: ToolCheck) -> ToolVerdict:
            session_id = session_of()
            try:
                rules = await self.rules.rules_async(cwd)
            except (RuleStoreError, OSError) as exc:
                log.warning("tool call %s denied: the rules cannot be read: %s", call.tool_call_id, exc)
                return ToolVerdict(allow=False, reason=f"denied: the permission rules cannot be read ({exc})")
            tool_call = ToolCall(
                tool=call.tool, kind=call.kind, command=call.command, path=call.path, session_id=session_id
            )
            verdict = decide(tool_call, self.mode_of(session_id), cwd, rules, can_answer=False)
            if verdict.decision == "allow":
                return ToolVerdict(allow=True)
            return ToolVerdict(allow=False, reason=verdict.reason)

        return check

    def close(self) -> None:
        """The bridge is done: its mode files go."""
        self.board.remove()
