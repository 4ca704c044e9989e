"""The ACP front's extension methods on a session: steering its running prompt, its checkpoints
and rewinds (`_pi/…`, and `_session/…` as other ACP agents name them)."""

from __future__ import annotations

from typing import Any

from acp import RequestError, schema
from pydantic import ValidationError

from bridge.contract import CheckpointsParams, RewindParams, RewindResult, WireModel
from bridge.fronts.acp.request_errors import RUN_FAILED, admin_failed, invalid_params
from bridge.fronts.acp.session.open_sessions import Sessions
from bridge.fronts.acp.updates import prompt_text
from bridge.runs.conversation_admin import ConversationAdmin, ConversationAdminError
from bridge.runs.registry import RunRegistry


class Extensions:
    """`_pi/steer`, `_pi/rewind_points`, `_pi/rewind`, `_session/steering`, `_session/rewind`."""

    def __init__(self, registry: RunRegistry, admin: ConversationAdmin, sessions: Sessions) -> None:
        self.registry = registry
        self.admin = admin
        self.sessions = sessions

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The extension method `_<method>`'s answer; an unknown one is method-not-found."""
        if method == "session/steering":
            return await self._steering(params)
        if method == "session/rewind":
            return {**await self._rewind("pi/rewind", params), "rewound": not params.get("dryRun")}
        if method in ("pi/rewind_points", "pi/rewind"):
            return await self._rewind(method, params)
        if method != "pi/steer":
            raise RequestError.method_not_found(f"_{method}")
        return await self._steer(params)

    async def _steer(self, params: dict[str, Any]) -> dict[str, Any]:
        """`_pi/steer {sessionId, message}`: hand the agent a steering message for the running prompt."""
        session_id, message = params.get("sessionId"), params.get("message")
        if not isinstance(session_id, str) or not isinstance(message, str) or not message:
            raise RequestError(-32602, "invalid params: _pi/steer needs sessionId and a non-empty message")
        session = self.sessions.known(session_id)
        if not session.runs:
            return {"accepted": False, "reason": "no prompt of this session is running"}
        result = await self.registry.steer(session.runs[0].run_id, message)
        return {"accepted": result.accepted, "reason": result.reason}

    async def _steering(self, params: dict[str, Any]) -> dict[str, Any]:
        """`_session/steering`, as claude-agent-acp and codex-acp answer it: `{outcome: "injected"}`,
        or `{outcome: "promptRequired", reason: "noRunningTurn"}` when no prompt runs (the client
        sends a prompt instead); a steer the agent refuses is an error naming its reason."""
        try:
            asked = schema.PromptRequest.model_validate(params)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        text = prompt_text(asked.prompt)
        if not text.strip():
            raise RequestError(-32602, "invalid params: prompt: _session/steering needs some text")
        session = self.sessions.known(asked.session_id)
        if not session.runs:
            return {"outcome": "promptRequired", "reason": "noRunningTurn"}
        result = await self.registry.steer(session.runs[0].run_id, text)
        if not result.accepted:
            reason = result.reason
            raise RequestError(RUN_FAILED, f"the steer was not taken: {reason}", {"reason": reason})
        return {"outcome": "injected"}

    async def _rewind(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """`_pi/rewind_points {sessionId}` and `_pi/rewind {sessionId, checkpointId, restore,
        dryRun?, force?}`: the session's checkpoints, and a rewind to one of them."""
        try:
            if method == "pi/rewind_points":
                listed = CheckpointsParams.model_validate(params)
                result: WireModel = await self.admin.checkpoints(listed.session_id)
            else:
                wanted = RewindParams.model_validate(params)
                result = await self.admin.rewind(wanted)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        except ConversationAdminError as exc:
            raise admin_failed(exc, params.get("sessionId")) from None
        if isinstance(result, RewindResult) and result.session_id != wanted.session_id:
            # a conversation rewind continues on a new session: the client prompts it from now on
            old = self.sessions.forget(wanted.session_id)
            cwd = old.cwd if old is not None else self.sessions.default_cwd
            servers = old.mcp_servers if old is not None else self.sessions.servers(None)
            await self.sessions.open(cwd, result.session_id, servers)
        answer: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return answer
