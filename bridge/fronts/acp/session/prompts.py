"""A session's prompts: each one's run, the mapper of its messages to session/updates, its answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import anyio
from acp import RequestError, schema

from bridge.contract import CancelledRunData, RetryPolicy, SandboxSettings
from bridge.fronts.acp.client_requests import ClientRequests
from bridge.fronts.acp.outbox import Outbox, SessionUpdate
from bridge.fronts.acp.request_errors import RUN_FAILED
from bridge.fronts.acp.session.open_sessions import AcpSession, Sessions
from bridge.fronts.acp.updates import (
    PromptMapper,
    prompt_images,
    prompt_text,
    prompt_usage,
    stop_reason_of,
    terminal_content,
)
from bridge.runs.registry import CommandUsageError, Run, RunRegistry, ShuttingDownError
from bridge.runs.request import RunRequest

log = logging.getLogger(__name__)

# The levels a run's `thinking` takes; the agent may offer others, they are not passed on.
THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh")
CANCELLED: Final = "cancelled by the client (session/cancel)"


class Prompts:
    """The running prompts by run id, each with its session and the mapper of its messages."""

    def __init__(
        self,
        registry: RunRegistry,
        sessions: Sessions,
        outbox: Outbox,
        client: ClientRequests,
        on_ended: Callable[[AcpSession], None],
    ) -> None:
        self.registry = registry
        self.sessions = sessions
        self.outbox = outbox
        self.client = client
        #: Called when a prompt of an open session has ended (its commands may have changed).
        self.on_ended = on_ended
        self.retry: RetryPolicy | None = None
        #: `_meta.piBridge.sandbox` of initialize: every prompt's sandbox (None: the configuration's).
        self.sandbox: SandboxSettings | None = None
        self._running: dict[str, tuple[str, PromptMapper]] = {}

    def on_messages(self, payloads: list[dict[str, Any]]) -> None:
        """The registry's sink: each run's messages, as session/updates of its session."""
        updates: list[SessionUpdate] = []
        for payload in payloads:
            entry = self._running.get(payload.get("runId", ""))
            if entry is None:
                continue
            session_id, mapper = entry
            updates.extend((session_id, update) for update in mapper.feed(payload))
        if updates:
            self.outbox.send(updates)

    def of_session(self, session_id: str) -> list[str]:
        """The run ids of the session's running prompts."""
        return [run_id for run_id, (sid, _) in self._running.items() if sid == session_id]

    def show_terminal(self, session_id: str, tool_call_id: str, terminal_id: str) -> None:
        """The client's terminal a tool call runs in, shown in the call from now on."""
        for prompt_session, mapper in self._running.values():
            if prompt_session == session_id:
                mapper.terminals[tool_call_id] = terminal_id
        update = schema.ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=tool_call_id,
            status="in_progress",
            content=[terminal_content(terminal_id)],
        )
        self.outbox.send_one(session_id, update)

    def start(
        self, session: AcpSession, prompt: list[Any], on_done: Callable[[Run], None] | None = None
    ) -> Run:
        """Start the prompt's run in the session's conversation, with the session's options."""
        text = prompt_text(prompt)
        if not text.strip():
            raise RequestError(
                -32602,
                "invalid params: prompt: no text, resource or resource_link content"
                " (an image goes with words)",
            )
        try:
            images = prompt_images(prompt)
        except ValueError as exc:
            raise RequestError(-32602, f"invalid params: {exc}") from None
        provider, _, model = session.model.rpartition("/")
        request = RunRequest(
            prompt=text,
            cwd=session.cwd,
            session_id=session.session_id,
            provider=provider or None,
            model=model or None,
            thinking=session.thinking if session.thinking in THINKING_LEVELS else None,  # type: ignore[arg-type]
            live_thoughts=True,
            retry=self.retry,
            images=images or None,
            mcp_servers=list(session.mcp_servers),
            sandbox=self.sandbox,
        )
        try:
            run = self.registry.start(request, session.cwd, on_done=on_done)
        except ShuttingDownError as exc:
            raise RequestError(-32600, str(exc)) from None
        except CommandUsageError as exc:
            raise RequestError(-32602, f"invalid params: {exc}") from None
        self._running[run.run_id] = (session.session_id, PromptMapper(session.cwd))
        session.runs.append(run)
        return run

    async def finish(self, session: AcpSession, run: Run) -> schema.PromptResponse:
        """The prompt's answer once its run is done and its updates are sent."""
        try:
            while not run.done.is_set():
                try:
                    await run.done.wait()
                except asyncio.CancelledError:
                    run.cancel.cancel("the ACP connection is closing")
                    with anyio.CancelScope(shield=True):
                        await run.done.wait()
                    raise
            await self.outbox.flush()
        finally:
            self.forget(session, run)
        return prompt_answer(run)

    def forget(self, session: AcpSession, run: Run) -> None:
        """The prompt has ended: no more updates of it."""
        self._running.pop(run.run_id, None)
        if run in session.runs:
            session.runs.remove(run)
            if session.session_id in self.sessions:
                self.on_ended(session)

    def stop(self, session_id: str) -> list[Run]:
        """Settle what the client is asked in the session and set its prompts' cancel tokens
        (each answers `cancelled` once its process tree is gone); the prompts stopped."""
        session = self.sessions.get(session_id)
        runs = list(session.runs) if session is not None else []
        self.client.settle(session_id)
        if not runs:
            log.info("session/cancel for %s: no prompt is running", session_id)
        for run in runs:
            run.cancel.cancel(CANCELLED)
        return runs


def prompt_answer(run: Run) -> schema.PromptResponse:
    """session/prompt's answer from the run's; a failed run is a RequestError."""
    answer = run.answer
    if isinstance(answer, CancelledRunData) and answer.unsent:
        # What the user sent into the prompt that never reached the model, for the client's input.
        meta = {"piBridge": {"unsent": answer.unsent}}
        return schema.PromptResponse(stop_reason="cancelled", field_meta=meta)
    if isinstance(answer, CancelledRunData) or answer is None:
        return schema.PromptResponse(stop_reason="cancelled")
    if answer.status == "failed":
        error = answer.error
        if error is None:
            raise RequestError(RUN_FAILED, "the run failed", {"kind": "internal", "retryable": False})
        raise RequestError(
            RUN_FAILED,
            error.message,
            {
                "kind": error.kind,
                "retryable": error.retryable,
                "stderr": error.stderr,
                "attempts": answer.attempts,
            },
        )
    usage = prompt_usage(answer.usage)
    return schema.PromptResponse(
        stop_reason=stop_reason_of(answer.stop_reason),
        usage=usage,
        field_meta={"piBridge": {"attempts": answer.attempts}},
    )


def answer_frame(msg_id: Any, run: Run) -> dict[str, Any]:
    """As the SDK's connection answers a request: the result as its model dumps it, a
    RequestError as its error object, anything else as an internal error."""
    payload: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id}
    try:
        payload["result"] = prompt_answer(run).model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude_unset=True
        )
    except RequestError as exc:
        payload["error"] = exc.to_error_obj()
    except Exception as exc:  # the bridge never dies from a prompt
        log.exception("prompt %s failed inside the bridge", run.run_id)
        payload["error"] = RequestError.internal_error({"details": str(exc)}).to_error_obj()
    return payload
