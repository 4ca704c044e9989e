"""pi/run, served from the frame that carries it: the prompt's path to the agent, kept short."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import orjson
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import JsonRPCProtocol

from bridge import contract
from bridge.fronts.lsp.params import parse_params
from bridge.fronts.lsp.writer import frame
from bridge.runs.registry import (
    AgentChoiceError,
    CommandUsageError,
    DuplicateRunError,
    Run,
    RunRegistry,
    ShuttingDownError,
)
from bridge.runs.request import RunRequest
from bridge.runs.trace import mark

log = logging.getLogger(__name__)

CANCEL_REQUEST = "$/cancelRequest"
REQUEST_CANCELLED = -32800


class RunRequests:
    """The pi/run requests of one connection, from their frame to their answer."""

    def __init__(
        self, protocol: JsonRPCProtocol, registry: RunRegistry, default_cwd: Callable[[], str]
    ) -> None:
        self._protocol = protocol
        self._registry = registry
        self._default_cwd = default_cwd
        self._pending: dict[Any, Run] = {}

    def handle(self, message: dict[str, Any]) -> bool:
        """Serve `message` if it is a pi/run request or a cancel of one; False: not ours."""
        method = message.get("method")
        if method == contract.RUN and "id" in message:
            if getattr(self._protocol, "_shutdown", False):
                return False  # pygls refuses every request after shutdown
            self._start(message["id"], message.get("params"))
            return True
        if method == contract.CANCEL:
            self._cancel_now(message.get("params"))
            return False  # answered by its handler once the run has ended
        if method == CANCEL_REQUEST:
            params = message.get("params")
            run = self._pending.get(params.get("id")) if isinstance(params, dict) else None
            if run is None:
                return False
            run.cancel.cancel("cancelled by $/cancelRequest")
            return True
        return False

    def _cancel_now(self, raw: Any) -> None:
        try:
            params = parse_params(contract.CancelParams, raw)
        except JsonRpcException:
            return  # its handler answers the error, and cancels nothing
        run = self._registry.live_run(params.run_id)
        if run is not None:
            run.cancel.cancel("cancelled by the client")

    def _start(self, msg_id: Any, raw: Any) -> None:
        mark("run.request")
        try:
            params = parse_params(contract.RunParams, raw)
            if params.cwd is not None and not (os.path.isabs(params.cwd) and os.path.isdir(params.cwd)):
                raise JsonRpcInvalidParams(
                    message=f"cwd: {params.cwd!r} is not an absolute path of an existing directory"
                )
            try:
                run = self._registry.start(
                    RunRequest.of(params), self._default_cwd(), on_done=lambda run: self._answer(msg_id, run)
                )
            except DuplicateRunError as exc:
                raise JsonRpcInvalidParams(message=f"runId: {exc}") from None
            except AgentChoiceError as exc:
                raise JsonRpcInvalidParams(message=f"agent: {exc}") from None
            except CommandUsageError as exc:
                raise JsonRpcInvalidParams(message=f"prompt: {exc}") from None
            except ShuttingDownError as exc:
                raise JsonRpcInvalidRequest(message=str(exc)) from None
        except JsonRpcException as exc:
            self._send({"id": msg_id, "error": _error(exc.code, exc.message, exc.data)})
            return
        except Exception as exc:  # the bridge never dies from what a client sends
            log.exception("could not start a run")
            self._send({"id": msg_id, "error": _error(-32603, f"internal error: {exc}")})
            return
        self._pending[msg_id] = run

    def _answer(self, msg_id: Any, run: Run) -> None:
        """The run ended: answer its request (before anyone waiting on the run goes on)."""
        if self._pending.get(msg_id) is run:
            del self._pending[msg_id]
        answer = run.answer
        if answer is None:
            self._send({"id": msg_id, "error": _error(-32603, f"run {run.run_id} ended without an answer")})
            return
        body = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(answer, contract.CancelledRunData):
            error = _error(REQUEST_CANCELLED, f"run {run.run_id} was cancelled", body)
            self._send({"id": msg_id, "error": error})
        else:
            self._send({"id": msg_id, "result": body})

    def _send(self, response: dict[str, Any]) -> None:
        writer = self._protocol.writer
        if writer is not None:
            writer.write(frame(orjson.dumps({"jsonrpc": "2.0", **response})))


def _error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error
