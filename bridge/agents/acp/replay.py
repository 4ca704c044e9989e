"""A session's history as an ACP agent replays it while it loads the session (its session/load),
read into the contract's turns, so the front that loads it shows it to the editor once."""

from __future__ import annotations

from typing import Any, Final

import orjson

from bridge.agents.acp.mapper import _content_text, _text, _tool_name
from bridge.contract import SessionHistory

#: The turns kept (the newest), and the most characters of one text: a long session stays bounded.
MAX_TURNS: Final = 500
MAX_TEXT: Final = 64 * 1024
CLIPPED: Final = "[… clipped by pi-bridge]"
_MERGED: Final = ("assistant", "assistant.thought")


class Replay:
    """The `session/update`s of one session/load, turned into turns as they come."""

    def __init__(self) -> None:
        #: Every update fed (the log's, when a load replays nothing).
        self.updates = 0
        self._turns: list[dict[str, Any]] = []
        self._omitted = 0
        #: The name of each call announced, by its id.
        self._called: dict[str, str] = {}
        self._closed: set[str] = set()
        #: A call the agent announced as done already: closed by its next update, else as announced.
        self._pending: dict[str, Any] | None = None

    def feed(self, update: Any) -> None:
        """One update of the session being loaded."""
        if not isinstance(update, dict):
            return
        self.updates += 1
        kind = update.get("sessionUpdate")
        pending = self._pending
        if pending is not None and not (
            kind == "tool_call_update" and update.get("toolCallId") == pending.get("toolCallId")
        ):
            self._close(pending)
        if kind == "user_message_chunk":
            self._user(_text(update.get("content")))
        elif kind in ("agent_message_chunk", "agent_thought_chunk"):
            text = _text(update.get("content"))
            if text:
                message = "assistant" if kind == "agent_message_chunk" else "assistant.thought"
                self._add(message, {"text": text})
        elif kind == "tool_call" and isinstance(update.get("toolCallId"), str):
            self._call(update)
            if update.get("status") in ("completed", "failed"):
                self._pending = update
        elif kind == "tool_call_update" and isinstance(update.get("toolCallId"), str):
            self._call(update)
            if update.get("status") in ("completed", "failed"):
                self._close(update)

    def history(self, session_id: str, cwd: str) -> SessionHistory | None:
        """What was replayed (None: nothing)."""
        if self._pending is not None:
            self._close(self._pending)
        if not self._turns:
            return None
        first = " ".join(self._turns[0]["prompt"].split())
        return SessionHistory.model_validate(
            {
                "sessionId": session_id,
                "cwd": cwd,
                "title": first[:80],
                "turns": self._turns,
                "omittedTurns": self._omitted or None,
            }
        )

    def _user(self, text: str) -> None:
        if not text:
            return
        turn = self._turns[-1] if self._turns else None
        if turn is not None and not turn["messages"]:
            turn["prompt"] = _clip(turn["prompt"] + text)
            return
        self._turns.append({"prompt": _clip(text), "messages": []})
        if len(self._turns) > MAX_TURNS:
            del self._turns[0]
            self._omitted += 1

    def _add(self, kind: str, content: dict[str, Any]) -> None:
        if not self._turns:
            self._turns.append({"prompt": "", "messages": []})
        messages: list[dict[str, Any]] = self._turns[-1]["messages"]
        if kind in _MERGED and messages and messages[-1]["type"] == kind:
            last = messages[-1]["content"]
            last["text"] = _clip(last["text"] + content["text"])
            return
        if "text" in content:
            content["text"] = _clip(content["text"])
        messages.append({"type": kind, "content": content})

    def _call(self, update: dict[str, Any]) -> None:
        call_id = str(update["toolCallId"])
        if call_id in self._called:
            return
        self._called[call_id] = _tool_name(update)
        raw = update.get("rawInput")
        arguments = raw if isinstance(raw, dict) else {}
        self._add("tool.call", {"toolCallId": call_id, "name": self._called[call_id], "arguments": arguments})

    def _close(self, update: dict[str, Any]) -> None:
        self._pending = None
        call_id = str(update["toolCallId"])
        if call_id in self._closed:
            return
        self._closed.add(call_id)
        name = self._called.get(call_id) or _tool_name(update)
        output = _content_text(update.get("content")) or _terminal_output(update)
        if not output and update.get("rawOutput") is not None:
            raw = update["rawOutput"]
            output = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
        output = _clip(output)
        if update.get("status") == "failed":
            failed = {"toolCallId": call_id, "name": name, "error": output or "the tool failed"}
            self._add("tool.failed", failed)
        else:
            self._add("tool.completed", {"toolCallId": call_id, "name": name, "output": output})


def _terminal_output(update: dict[str, Any]) -> str:
    """The output an agent sends in `_meta` (pi-acp's terminal output of a command)."""
    meta = update.get("_meta")
    terminal = meta.get("terminal_output") if isinstance(meta, dict) else None
    data = terminal.get("data") if isinstance(terminal, dict) else None
    return data if isinstance(data, str) else ""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + CLIPPED
