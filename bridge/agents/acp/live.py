"""The bridge as the ACP client of one agent process: JSON-RPC lines over the agent's stdio."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import orjson
from acp import PROTOCOL_VERSION, schema
from pydantic import ValidationError

from bridge.agents.acp import options as own
from bridge.agents.acp.catalog import MCP_ENV, SESSION_ENV, SETTLED_LINE, AcpAgentSpec, model_value
from bridge.agents.acp.client_fs import FS_METHODS, fs_answer, fs_op, refused
from bridge.agents.acp.mcp import session_servers
from bridge.agents.live_client import JsonRpcLiveClient
from bridge.agents.live_reader import PendingCommand
from bridge.agents.mapping import json_object
from bridge.agents.values import (
    SESSION_MODE,
    AgentCommand,
    AgentOption,
    BridgeCommand,
    CommandDone,
    DoFileOp,
    FileOp,
    LiveError,
    LiveErrorKind,
    LiveState,
    ModelChoice,
    ToolCheck,
    ToolVerdict,
)
from bridge.config import env_number
from bridge.contract import ErrorKind, PromptImage, ToolKind
from bridge.process.spawn import ChildProcess
from bridge.process.trace import mark

log = logging.getLogger(__name__)

#: An ACP agent's start (a Node program that starts its own agent) and its session/new.
START_TIMEOUT_ENV: Final = "PI_BRIDGE_ACP_START_TIMEOUT"


def start_timeout() -> float:
    """The bound of the start ($PI_BRIDGE_ACP_START_TIMEOUT, else 60 s), read at each start."""
    return env_number(START_TIMEOUT_ENV, 60.0)


#: How long a new session waits for an agent's start-up note (`startup_chunk`) before it is ready.
STARTUP_CHUNK_SECONDS: Final = 0.5
_BARE_END: Final = b'{"type":"prompt_end","stopReason":"end_turn"}'
_KINDS: Final[dict[str, ToolKind]] = {
    "read": "read",
    "search": "read",
    "fetch": "read",
    "edit": "edit",
    "delete": "edit",
    "move": "edit",
    "execute": "execute",
}
_ALLOW: Final = ("allow_once", "allow_always")
#: A prompt answered with these (an internal error; "resource not found": the agent no longer
#: knows the session) leaves the process of no further use.
_BROKEN_CODES: Final = frozenset({-32603, -32002})
_REJECT: Final = ("reject_once", "reject_always")


class AcpLiveError(LiveError):
    """A request the ACP agent refused, did not answer in time, or could not take."""

    def __init__(
        self,
        agent: str,
        command: str,
        reason: str,
        *,
        kind: LiveErrorKind,
        error_kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(f"{agent}'s `{command}` {reason}", command, kind=kind, error_kind=error_kind)


def launch_env(child: ChildProcess) -> dict[str, str]:
    """The environment the process was started with (what the launch asked of it)."""
    return dict(child.env)


class AcpLive(JsonRpcLiveClient):
    """The client side of one ACP agent process."""

    #: pi-acp runs pi, claude-agent-acp runs Claude Code: their agent is their child.
    runs_agent_as_child = True

    def __init__(
        self,
        child: ChildProcess,
        spec: AcpAgentSpec,
        *,
        wait_writable: Callable[[], Awaitable[None]] | None = None,
        on_session: Callable[[str, str], None] | None = None,
    ) -> None:
        super().__init__(child, wait_writable=wait_writable)
        self.spec = spec
        self._on_session = on_session
        self._prompt: PendingCommand | None = None
        self._end = _BARE_END
        self._acp_session: str | None = None
        self._startup_chunk = asyncio.Event()
        self._session_id: str | None = None
        self._models: tuple[ModelChoice, ...] = ()
        self._commands = own.CommandsHeard()
        #: The agent's own modes and config options (its model aside), as it last said them.
        self._options: tuple[AgentOption, ...] = ()
        self._images = False
        self._broken = False
        #: The tool call the agent last announced or asked about: its `fs/*` requests name none.
        self._tool_call = ""
        #: The tool calls the agent announced in this process (`tool_call` updates).
        self._announced: set[str] = set()

    # ------------------------------------------------------------------ the seam

    def _error(self, command: str, reason: str, *, kind: LiveErrorKind) -> LiveError:
        return AcpLiveError(self.spec.display_name, command, reason, kind=kind)

    @property
    def asks_before_changes(self) -> bool:
        """Not promised: an ACP agent asks about what it chooses (pi-acp about nothing)."""
        return False

    @property
    def run_end_line(self) -> bytes:
        """The prompt's answer, as the mapper reads it."""
        return self._end

    async def prepare(self) -> LiveState:
        """initialize, then the session the launch named: a new one, or a stored one loaded."""
        init = schema.InitializeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(
                    read_text_file=self.spec.client_fs, write_text_file=self.spec.client_fs
                ),
                terminal=False,
            ),
        )
        answer = await self.request("initialize", _dump(init), start_timeout())
        agent = schema.InitializeResponse.model_validate(answer)
        caps = agent.agent_capabilities
        self._images = bool(caps and caps.prompt_capabilities and caps.prompt_capabilities.image)
        can_load = bool(caps and caps.load_session)
        env = launch_env(self.child)
        plan = env.get(SESSION_ENV, "new")
        cwd = self._cwd()
        meta = dict(self.spec.session_meta) or None
        servers = _servers(self.spec.display_name, env.get(MCP_ENV), caps.mcp_capabilities if caps else None)
        opened: dict[str, Any]
        if plan.startswith("load:") and not can_load:
            # a new session would drop the conversation unsaid (a sandbox change restarts it)
            reason = "cannot be done: this agent cannot load a session into a new process"
            raise AcpLiveError(self.spec.display_name, "session/load", reason, kind="refused")
        if plan.startswith("load:"):
            wanted, _, bridge_id = plan.removeprefix("load:").partition("|")
            load = schema.LoadSessionRequest(session_id=wanted, cwd=cwd, mcp_servers=servers, field_meta=meta)
            opened = await self.request("session/load", _dump(load), start_timeout())
            self._acp_session, self._session_id = wanted, bridge_id or wanted
        else:
            new = schema.NewSessionRequest(cwd=cwd, mcp_servers=servers, field_meta=meta)
            opened = await self.request("session/new", _dump(new), start_timeout())
            self._acp_session = str(opened.get("sessionId") or "")
            await _startup_note(self.spec, self._startup_chunk)
            named = plan.partition(":")[2].rpartition("|")[2]
            # a conversation the bridge named keeps its name (the agent's own id stays inside)
            self._session_id = named or self._acp_session
        if not self._acp_session:
            raise AcpLiveError(self.spec.display_name, "session/new", "named no session", kind="refused")
        self._commands.opened()
        if self._on_session is not None and self._session_id:
            self._on_session(self._session_id, self._acp_session)
        self._models, current = own.read_models(self.spec, opened)
        self._options = own.opened_options(self.spec, opened)
        if self.spec.model_env and env.get(self.spec.model_env):
            current = env[self.spec.model_env]
        return LiveState(
            session_id=self._session_id,
            provider=self.spec.provider,
            model=current,
            message_count=1 if plan.startswith("load:") else 0,
        )

    async def switch_session(self, session_file: str) -> LiveState:
        """Refused: a process serves the one session it opened (a resumed one starts a process)."""
        raise AcpLiveError(
            self.spec.display_name, "switch_session", "is not done on a running agent", kind="refused"
        )

    async def set_model(self, provider: str, model: str) -> None:
        """`session/set_config_option` "model", with the agent's own id of the model; nothing for
        the model the process was launched on (Gemini CLI's session has no model option)."""
        if self.spec.model_env and launch_env(self.child).get(self.spec.model_env) == model:
            return
        request = schema.SetSessionConfigOptionSelectRequest(
            session_id=self._acp_session or "",
            config_id="model",
            value=model_value(self.spec, provider, model),
        )
        await self.request("session/set_config_option", _dump(request))

    async def agent_options(self) -> tuple[AgentOption, ...]:
        """The agent's own modes and config options as they are now."""
        return self._options

    async def set_agent_option(self, option_id: str, value: str) -> tuple[AgentOption, ...]:
        """`session/set_mode` for its modes, `session/set_config_option` for the rest; the
        options as the agent's answer gives them."""
        session = self._acp_session or ""
        if option_id == SESSION_MODE:
            await self.request("session/set_mode", {"sessionId": session, "modeId": value})
            self._options = own.with_current(self._options, option_id, value)
            return self._options
        params = {"sessionId": session, "configId": option_id, "value": value}
        answer = await self.request("session/set_config_option", params)
        given = own.updated(self.spec, self._options, {"sessionUpdate": "config_option_update", **answer})
        self._options = (
            given
            if answer.get("configOptions") is not None and given is not None
            else (own.with_current(self._options, option_id, value))
        )
        return self._options

    async def set_thinking(self, level: str) -> None:
        """Nothing: ACP has no thinking level (an agent may offer one as a mode of its own)."""

    async def available_models(self) -> tuple[ModelChoice, ...]:
        """The values of the session's `model` config option."""
        return self._models

    async def thinking_levels(self) -> list[str]:
        """None (see `set_thinking`)."""
        return []

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> PendingCommand:
        """Write `session/prompt` now; its answer is the turn's end (read as the settled line)."""
        blocks = _prompt_blocks(self.spec.display_name, text, images, takes_images=self._images)
        request = schema.PromptRequest(session_id=self._acp_session or "", prompt=blocks)
        self._end = _BARE_END
        pending = self._request_now("session/prompt", _dump(request))
        self._waiting.pop(pending.command_id, None)
        self._prompt = pending
        return pending

    async def request(
        self, method: str, params: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Send one request and wait (bounded) for its answer."""
        return await self._sent_and_answered(self._request_now(method, params), timeout)

    async def steer(self, text: str) -> None:
        """Refused: ACP has no message into a running turn."""
        raise AcpLiveError(
            self.spec.display_name, "steer", "is not something ACP offers mid-turn", kind="refused"
        )

    def send_abort_now(self) -> PendingCommand:
        """Write `session/cancel` now; its acknowledgement is the prompt's answer."""
        pending = PendingCommand("session/cancel", "cancel")
        if self._prompt is None:
            pending.response = {"result": {}}
            pending.answered.set()
            return pending
        cancel = schema.CancelNotification(session_id=self._acp_session or "")
        message = {"jsonrpc": "2.0", "method": "session/cancel", "params": _dump(cancel)}
        self._write("session/cancel", orjson.dumps(message) + b"\n")
        self._interrupting = pending
        return pending

    async def commands(self) -> list[AgentCommand]:
        """The agent's own, as it last listed them (its first list waited for: `CommandsHeard`)."""
        return await self._commands.current()

    async def run_command(self, command: BridgeCommand) -> CommandDone:
        """Refused: the bridge's own commands are not ACP requests."""
        raise AcpLiveError(
            self.spec.display_name, f"/{command.name}", "is not something ACP offers", kind="refused"
        )

    async def clone(self) -> LiveState:
        """Refused (ACP's session/fork is unstable, and not offered by every agent)."""
        raise AcpLiveError(self.spec.display_name, "clone", "is not done through ACP", kind="refused")

    async def fork_before(self, prompt: str, ordinal: int) -> LiveState:
        """Refused (see `clone`)."""
        raise AcpLiveError(self.spec.display_name, "fork", "is not done through ACP", kind="refused")

    async def rename(self, title: str) -> None:
        """Refused: ACP gives the client no title to set."""
        raise AcpLiveError(self.spec.display_name, "rename", "is not done through ACP", kind="refused")

    # ------------------------------------------------------------------ writing

    def _reply(self, request_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> bytes:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        return orjson.dumps(message) + b"\n"

    # ------------------------------------------------------------------ reading

    def _awaiting_answers(self) -> bool:
        return bool(self._waiting) or self._prompt is not None

    def _on_closed(self) -> None:
        for pending in [*self._waiting.values(), *(p for p in (self._prompt, self._interrupting) if p)]:
            pending.answered.set()

    def _dispatch(self, lines: list[bytes]) -> None:
        mark("agent.out")
        self.lines_read += len(lines)
        events: list[bytes] = []
        for line in lines:
            if not line.strip():
                continue
            message = json_object(line)
            if message is None:
                events.append(line)  # the mapper counts it as output it could not read
                continue
            method = message.get("method")
            if method is None:
                if self._answered(message):
                    events.append(SETTLED_LINE)
                continue
            if "id" in message:
                self._asked(message)
                continue
            if method == "session/update":
                events += self._session_update(line, message.get("params"))
        listener = self.listener
        if events and listener is not None:
            listener(events)
        self._retire_if_broken()

    def _retire_if_broken(self) -> None:
        """After the turn's end went out: a broken agent counts as closed, so the conversation's
        next prompt loads the session in a new process (the registry stops this one)."""
        if self._broken and not self.closed.is_set():
            log.warning("%s answered a prompt with an internal error: not used again", self.spec.display_name)
            self.closed.set()
            self._on_closed()

    def _answered(self, message: dict[str, Any]) -> bool:
        """Note an answer; True when it is the running prompt's (the turn is over)."""
        command_id = str(message.get("id"))
        prompt = self._prompt
        if prompt is not None and prompt.command_id == command_id:
            mark("agent.answered")
            self._prompt = None
            result = message.get("result")
            end: dict[str, Any] = {"type": "prompt_end"}
            if isinstance(result, dict):
                end["stopReason"] = result.get("stopReason") or "end_turn"
                if isinstance(result.get("usage"), dict):
                    end["usage"] = result["usage"]
            else:
                error = message.get("error")
                end["error"] = error or {"message": "the prompt was answered with nothing"}
                # claude-agent-acp may end its session in a race with a cancel ("The Claude Agent
                # session has ended", then "Resource not found"): the process is not reused.
                self._broken = not isinstance(error, dict) or error.get("code") in _BROKEN_CODES
            self._end = orjson.dumps(end)
            prompt.response = message
            prompt.answered.set()
            cancelling, self._interrupting = self._interrupting, None
            if cancelling is not None:
                cancelling.response = {"result": {}}
                cancelling.answered.set()
            return True
        self._deliver(command_id, message)
        return False

    def _asked(self, message: dict[str, Any]) -> None:
        """A request of the agent's: a permission is the run's to decide; the rest is refused."""
        request_id = message.get("id")
        if message.get("method") in FS_METHODS and self.spec.client_fs:
            self._fs(request_id, str(message["method"]), message.get("params"))
            return
        if message.get("method") != "session/request_permission":
            error = {"code": -32601, "message": f"{message.get('method')} is not offered by pi-bridge"}
            self._write_quietly(self._reply(request_id, error=error))
            return
        try:
            asked = schema.RequestPermissionRequest.model_validate(message.get("params"))
        except ValidationError:
            error = {"code": -32602, "message": "not a permission request the bridge can read"}
            self._write_quietly(self._reply(request_id, error=error))
            return
        key = str(request_id)
        if key in self._open_checks:
            return
        self._open_checks.add(key)
        check = tool_check(asked)
        self._tool_call = check.tool_call_id
        self._announce(message.get("params"))
        asks, tasks = self.asks, self._tasks
        answer = _permission_answer(request_id, asked)
        if asks is None or tasks is None:
            self._settle(key, answer(ToolVerdict(allow=False, reason="denied: no run is listening")))
            return
        tasks.start_soon(self._decide, key, check, asks, answer)

    def _session_update(self, line: bytes, params: Any) -> list[bytes]:
        """The line for the run, when it is of the session's running turn (outside a turn: a
        start-up banner, the agent's commands, not a run's output); the agent's state noted."""
        if not isinstance(params, dict):
            return []
        if self._acp_session is None:
            # The session being opened: its first updates (OpenCode's commands) may come in the
            # same read as the answer to session/new, before the session's id is noted.
            self._note_state(params.get("update"))
            _note_startup(params.get("update"), self._startup_chunk)
            return []
        if params.get("sessionId") != self._acp_session:
            return []
        self._note_state(params.get("update"))
        if not self._prompt:
            _note_startup(params.get("update"), self._startup_chunk)
            return []
        self._note_tool_call(params.get("update"))
        return [line]

    def _note_state(self, update: Any) -> None:
        """The agent's commands, modes and options, kept as it says them (in a turn or not)."""
        if not isinstance(update, dict):
            return
        self._commands.note(update)
        changed = own.updated(self.spec, self._options, update)
        if changed is not None:
            self._options = changed

    def _note_tool_call(self, update: Any) -> None:
        if isinstance(update, dict) and update.get("sessionUpdate") == "tool_call":
            self._tool_call = str(update.get("toolCallId") or "")
            self._announced.add(self._tool_call)

    def _announce(self, params: Any) -> None:
        """A tool call first heard of in a permission request streamed as its `tool_call`: Gemini
        CLI announces an asked call only by asking, then sends its updates."""
        call = params.get("toolCall") if isinstance(params, dict) else None
        listener = self.listener
        if not isinstance(call, dict) or call.get("toolCallId") in self._announced or self._prompt is None:
            return
        self._announced.add(str(call.get("toolCallId")))
        update = {**call, "sessionUpdate": "tool_call"}
        line = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": self._acp_session, "update": update},
        }
        if listener is not None:
            listener([orjson.dumps(line)])

    def _fs(self, request_id: Any, method: str, params: Any) -> None:
        """An `fs/*` request done by the run's file operations (client_fs.py), answered once."""
        key = f"fs:{request_id}"
        if key in self._open_checks:
            return
        self._open_checks.add(key)
        op = fs_op(method, params, self._tool_call)
        file_ops, tasks = self.file_ops, self._tasks
        if op is None or file_ops is None or tasks is None:
            reason = "not a file request the bridge can read" if op is None else "no run is listening"
            self._settle(key, refused(request_id, reason))
            return
        tasks.start_soon(self._file_op, key, request_id, op, params, file_ops)

    async def _file_op(self, key: str, request_id: Any, op: FileOp, params: Any, file_ops: DoFileOp) -> None:
        self._deciding += 1
        try:
            line = await fs_answer(request_id, op, params, file_ops)
        except Exception:
            log.exception("%s: the file request %s failed", self.spec.display_name, op.op)
            line = refused(request_id, "the bridge could not do the file operation")
        finally:
            self._deciding -= 1
            self.reading_since = time.monotonic()
        self._settle(key, line)


def _servers(agent: str, config: str | None, caps: schema.McpCapabilities | None) -> list[Any]:
    """The conversation's MCP servers (the private file the launch named) in ACP's form; a
    transport the agent does not take fails the start, naming it, rather than drop the server."""
    try:
        return session_servers(config, http=bool(caps and caps.http))
    except ValueError as exc:
        raise AcpLiveError(agent, "session/new", str(exc), kind="refused", error_kind="usage") from exc


def _prompt_blocks(agent: str, text: str, images: Sequence[PromptImage], *, takes_images: bool) -> list[Any]:
    """The prompt's content blocks, its images first; images to an agent that takes none fail
    the prompt, naming it (dropped, the model would answer a prompt the user did not send)."""
    if images and not takes_images:
        reason = "takes no images (its promptCapabilities.image is false): the prompt was not sent"
        raise AcpLiveError(agent, "session/prompt", reason, kind="refused", error_kind="usage")
    blocks: list[Any] = [
        schema.ImageContentBlock(type="image", data=i.data, mime_type=i.mime_type) for i in images
    ]
    blocks.append(schema.TextContentBlock(type="text", text=text))
    return blocks


def tool_check(asked: schema.RequestPermissionRequest) -> ToolCheck:
    """The seam's view of what the agent asks about."""
    call = asked.tool_call
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    meta = call.field_meta or {}
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    tool = (claude or {}).get("toolName") if isinstance(claude, dict) else None
    kind = _KINDS.get(str(call.kind), "other")
    command = raw.get("command") if isinstance(raw.get("command"), str) else None
    if command is None and not raw and call.kind == "execute" and call.title:
        command = call.title  # Gemini CLI sends no rawInput: its title is the command
    path = next((raw[k] for k in ("file_path", "path", "abs_path") if isinstance(raw.get(k), str)), None)
    if path is None and call.locations:  # Gemini CLI names the file only here
        path = call.locations[0].path
    if command is not None and kind == "other":
        kind = "execute"
    return ToolCheck(
        tool_call_id=call.tool_call_id,
        tool=str(tool or call.title or call.kind or "tool"),
        kind=kind,
        input=raw,
        command=command,
        path=path,
    )


def _permission_answer(
    request_id: Any, asked: schema.RequestPermissionRequest
) -> Callable[[ToolVerdict], bytes]:
    """The reply to a permission request for a verdict: the offered option of the matching kind
    (once, never always: the bridge's rules remember, not the agent), else cancelled."""

    def answer(verdict: ToolVerdict) -> bytes:
        wanted = _ALLOW if verdict.allow else _REJECT
        option = next((o for kind in wanted for o in asked.options if o.kind == kind), None)
        outcome: dict[str, Any] = (
            {"outcome": "selected", "optionId": option.option_id}
            if option is not None
            else {"outcome": "cancelled"}
        )
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": outcome}}) + b"\n"

    return answer


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _note_startup(update: Any, seen: asyncio.Event) -> None:
    """A message chunk outside a turn: the agent's start-up note (see `startup_chunk`)."""
    if isinstance(update, dict) and update.get("sessionUpdate") == "agent_message_chunk":
        seen.set()


async def _startup_note(spec: AcpAgentSpec, seen: asyncio.Event) -> None:
    """Wait (bounded) for an agent's start-up note after session/new, so no prompt takes it in."""
    if spec.startup_chunk:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(seen.wait(), STARTUP_CHUNK_SECONDS)
