"""The writing half every live client shares: commands written, drained and awaited, and its end."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Final

import anyio
import orjson
import psutil

from bridge.agents.live_reader import LiveReader, PendingCommand, own_command
from bridge.agents.seam import LiveCommand
from bridge.agents.values import LiveError, LiveErrorKind, SessionStats
from bridge.config import env_number
from bridge.process.stdin_pipe import StdinClosed

COMMAND_TIMEOUT_ENV: Final = "PI_BRIDGE_RPC_COMMAND_TIMEOUT"


def command_timeout(timeout: float | None = None) -> float:
    """`timeout`, else how long a command waits for its answer ($PI_BRIDGE_RPC_COMMAND_TIMEOUT).

    A live agent answers a command at once (the first command of a fresh one waits for its
    start-up, under a bound of its own). Past this, the agent is not answering.
    """
    return env_number(COMMAND_TIMEOUT_ENV, 10.0) if timeout is None else timeout


class LiveClientBase(LiveReader):
    """A live agent's client: its commands in flight, how they are written, drained and answered."""

    #: How error texts name the agent in "… closed its output".
    who: str = "the agent"

    def _error(self, command: str, reason: str, *, kind: LiveErrorKind) -> LiveError:
        """The agent's error for `command` (its wording, its refusal's kind)."""
        raise NotImplementedError

    def _reply_data(self, command: str, response: dict[str, Any]) -> dict[str, Any]:
        """What an answer carries; raises `_error(kind="refused")` when it is a refusal."""
        raise NotImplementedError

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _send_line(self, pending: PendingCommand, line: bytes) -> PendingCommand:
        """Write a command's line now (from a synchronous callback too) and await its answer by id."""
        self._write(pending.name, line)
        self._waiting[pending.command_id] = pending
        self._cut_client_wait()
        return pending

    def _write(self, name: str, line: bytes) -> None:
        if self.closed.is_set():
            raise self._error(name, f"could not be sent: {self.who} has closed its output", kind="closed")
        try:
            self.child.stdin.write_now(line)
        except (StdinClosed, OSError) as exc:
            raise self._error(name, f"could not be sent: {exc}", kind="closed") from exc

    async def _drain(self, pending: PendingCommand, timeout: float | None) -> None:
        """Wait (bounded) until the agent has read what was written."""
        timeout = command_timeout(timeout)
        try:
            with anyio.fail_after(timeout):
                await self.child.stdin.drain()
        except StdinClosed as exc:
            self._waiting.pop(pending.command_id, None)
            raise self._error(pending.name, f"could not be sent: {exc}", kind="closed") from exc
        except TimeoutError as exc:
            self._waiting.pop(pending.command_id, None)
            raise self._error(
                pending.name, f"was not read by {self.who} within {timeout:g} s", kind="timeout"
            ) from exc

    async def answer(self, pending: LiveCommand, timeout: float | None = None) -> dict[str, Any]:
        """Wait (bounded) for the answer to a sent command; what it carries."""
        timeout = command_timeout(timeout)
        request = own_command(pending)
        try:
            if not request.answered.is_set():  # one answered already costs no trip round the loop
                with anyio.move_on_after(timeout):
                    await request.answered.wait()
        finally:
            self._waiting.pop(request.command_id, None)
        response = request.response
        if response is None:
            if self.closed.is_set():
                raise self._error(request.name, f"got no answer: {self.who} closed its output", kind="closed")
            raise self._error(request.name, f"got no answer within {timeout:g} s", kind="timeout")
        return self._reply_data(request.name, response)

    def send_abort_now(self) -> PendingCommand:
        """Write the agent's interrupt now; its answer (the turn ended) is awaited with `answer`."""
        raise NotImplementedError

    async def abort(self, timeout: float) -> None:
        """Interrupt the turn; done once the turn ended."""
        await self.answer(self.send_abort_now(), timeout)

    def _as_interrupt(self, pending: PendingCommand) -> PendingCommand:
        """Await `pending` as the interrupt: answered when the turn ends, not by its id."""
        self._waiting.pop(pending.command_id, None)
        self._interrupting = pending
        return pending

    def _refuse(self, command: str, reason: str) -> LiveError:
        return self._error(command, reason, kind="refused")

    async def _sent_and_answered(self, pending: PendingCommand, timeout: float | None) -> dict[str, Any]:
        """Wait (bounded) until the agent has read a command, then for its answer."""
        await self._drain(pending, timeout)
        return await self.answer(pending, timeout)

    async def delivered(self, pending: LiveCommand, timeout: float | None = None) -> dict[str, Any]:
        """Wait (bounded) until the agent has read the prompt (its answer comes at the turn's end)."""
        await self._drain(own_command(pending), timeout)
        return {}

    def _cwd(self) -> str:
        """The agent's working directory (the bridge's, once the process is gone)."""
        with contextlib.suppress(psutil.Error, OSError):
            if self.child.handle is not None:
                return str(self.child.handle.cwd())
        return os.getcwd()

    def send_clear_queue_now(self) -> LiveCommand | None:
        """None: the agent holds no queue of a turn's messages the bridge can take back."""
        return None

    async def unsent(self, command: LiveCommand, timeout: float | None = None) -> list[str]:
        """Nothing (see `send_clear_queue_now`)."""
        return []

    async def stats(self, timeout: float | None = None) -> SessionStats:
        """Nothing more than the turn's end said."""
        return SessionStats()

    def close_stdin(self) -> None:
        """Ask the agent for an orderly exit (stdin EOF: an idle one exits at once)."""
        self.child.stdin.close()

    def _deliver(self, command_id: str, response: dict[str, Any]) -> bool:
        """Hand an answer to the command of `command_id` awaiting it; whether one was."""
        pending = self._waiting.pop(command_id, None)
        if pending is None:
            return False
        pending.response = response
        pending.answered.set()
        return True

    def _awaiting_answers(self) -> bool:
        return bool(self._waiting) or self._interrupting is not None

    def _on_closed(self) -> None:
        for pending in [*self._waiting.values(), *([self._interrupting] if self._interrupting else [])]:
            pending.answered.set()


class JsonRpcLiveClient(LiveClientBase):
    """A live client whose commands are JSON-RPC requests (ACP, Codex's app-server)."""

    #: The `jsonrpc` member every request carries (None: the agent's dialect has none).
    jsonrpc: str | None = "2.0"

    def _request_now(self, method: str, params: dict[str, Any]) -> PendingCommand:
        """Write a request now (from a synchronous callback too); its answer is awaited by id."""
        number = self._new_id()
        message: dict[str, Any] = {"jsonrpc": self.jsonrpc} if self.jsonrpc else {}
        message |= {"id": number, "method": method, "params": params}
        return self._send_line(PendingCommand(method, str(number)), orjson.dumps(message) + b"\n")

    def _reply_data(self, command: str, response: dict[str, Any]) -> dict[str, Any]:
        """The answer's `result` ({} if none); raises for its `error`."""
        failure = response.get("error")
        if failure is not None:
            message = failure.get("message") if isinstance(failure, dict) else failure
            raise self._refuse(command, f"was refused: {message}")
        result = response.get("result")
        return result if isinstance(result, dict) else {}
