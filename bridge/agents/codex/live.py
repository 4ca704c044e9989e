"""Codex's live mode: one ``codex app-server`` per conversation (JSON-RPC over stdio, one object a
line, no ``"jsonrpc"`` field).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import logging
import os
import pathlib
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import anyio
import orjson

from bridge.agents.codex import mcp_exec, sessions
from bridge.agents.codex.command import sandbox_mode
from bridge.agents.codex.mapper import classify_exit
from bridge.agents.live_client import JsonRpcLiveClient
from bridge.agents.live_reader import PendingCommand
from bridge.agents.seam import LiveCommand
from bridge.agents.values import (
    MCP_PROMPT_ACCEPT_SECONDS,
    AgentCommand,
    BridgeCommand,
    CommandDone,
    EventKind,
    LaunchSpec,
    LiveError,
    LiveErrorKind,
    LiveState,
    ModelChoice,
    RunOptions,
    ToolCheck,
    ToolVerdict,
)
from bridge.contract import ErrorKind, McpServerHttp, McpServerStdio, PromptImage
from bridge.process.spawn import ChildProcess

log = logging.getLogger(__name__)

#: How long the app-server's first answers may take (a native binary, but a busy machine).
START_TIMEOUT_SECONDS: Final = 60.0
#: The `-c` setting the launch names the conversation's stored thread in (Codex ignores it,
#: saying so on stderr). In argv, not the environment: /proc's environ of a process read right
#: after its spawn can still be the bridge's, before the exec (a resumed thread then started anew).
THREAD_SETTING: Final = "pi_bridge_thread"
#: The `-c` setting naming the conversation's private MCP file (ignored by Codex, as above).
MCP_SETTING: Final = "pi_bridge_mcp_config"
PROVIDER: Final = "codex"
_TURN_END: Final = (b'{"type":"turn.completed"', b'{"type":"turn.failed"')
_BARE_END: Final = b'{"type":"turn.completed"}'
_APPROVALS: Final = {
    "item/commandExecution/requestApproval": "execute",
    "item/fileChange/requestApproval": "edit",
}


def _snake(item: dict[str, Any]) -> dict[str, Any]:
    """An app-server item in exec's spelling (``commandExecution`` → ``command_execution``)."""
    kinds = {
        "agentMessage": "agent_message",
        "commandExecution": "command_execution",
        "fileChange": "file_change",
        "mcpToolCall": "mcp_tool_call",
        "webSearch": "web_search",
        "reasoning": "reasoning",
    }
    status = str(item.get("status") or "")
    snake = {
        "id": item.get("id"),
        "type": kinds.get(str(item.get("type")), str(item.get("type"))),
        "text": item.get("text"),
        "command": item.get("command"),
        "aggregated_output": item.get("aggregatedOutput"),
        "exit_code": item.get("exitCode"),
        "status": {"inProgress": "in_progress"}.get(status, status),
        "changes": item.get("changes"),
    }
    if item.get("type") == "mcpToolCall":
        snake |= {k: item.get(k) for k in ("server", "tool", "arguments")}
        snake["aggregated_output"] = _mcp_output(item)
    return snake


def _mcp_output(item: dict[str, Any]) -> str | None:
    """An MCP tool call's result as text (its text blocks), or its error's message."""
    result, error = item.get("result"), item.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return None
    return "".join(
        str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"
    )


class CodexLive(JsonRpcLiveClient):
    """The client side of one ``codex app-server`` (its tools do their own I/O: no `file_ops`)."""

    who = "Codex"
    jsonrpc = None

    def __init__(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        super().__init__(child, wait_writable=wait_writable)
        self._end = _BARE_END
        self._thread: str | None = None
        self._turn: str | None = None
        self._model: str | None = None
        self._usage: dict[str, Any] | None = None
        self._env: Mapping[str, str] = {}
        #: The MCP servers named at launch whose start Codex has not reported over yet.
        self._mcp_starting: set[str] = set()
        self._mcp_started: anyio.Event | None = None

    # ------------------------------------------------------------------ the seam

    def _error(self, command: str, reason: str, *, kind: LiveErrorKind) -> LiveError:
        return LiveError(f"Codex's `{command}` {reason}", command, kind=kind)

    @property
    def asks_before_changes(self) -> bool:
        """Codex asks before every command and file change (``untrusted``)."""
        return True

    @property
    def run_end_line(self) -> bytes:
        """The turn's end, rewritten as exec's ``turn.completed`` (or ``turn.failed``)."""
        return self._end

    async def prepare(self) -> LiveState:
        """``initialize``, then the conversation's thread: started, or resumed when stored."""
        self._env = self.child.env
        await self.request(
            "initialize", {"clientInfo": {"name": "pi-bridge", "version": "1"}}, START_TIMEOUT_SECONDS
        )
        self._write("initialized", orjson.dumps({"method": "initialized", "params": {}}) + b"\n")
        launched = _launch_settings(self.child.argv)
        refused = _headed_http_servers(launched.get(MCP_SETTING))
        if refused:
            raise self._error(
                "thread/start",
                f"is not given MCP servers with headers ({', '.join(refused)}): they would be in its argv",
                kind="refused",
            )
        params: dict[str, Any] = {
            "cwd": self._cwd(),
            "approvalPolicy": "untrusted",
            "sandbox": launched.get("sandbox_mode") or "danger-full-access",
        }
        model = launched.get("model")
        if model:
            params["model"] = model
        thread = launched.get(THREAD_SETTING)
        self._mcp_starting, self._mcp_started = _mcp_names(self.child.argv), anyio.Event()
        if thread:
            answer = await self.request(
                "thread/resume", {**params, "threadId": thread}, START_TIMEOUT_SECONDS
            )
        else:
            answer = await self.request("thread/start", params, START_TIMEOUT_SECONDS)
        await self._mcp_servers_started()
        started = answer.get("thread")
        self._thread = str(started["id"]) if isinstance(started, dict) and "id" in started else thread
        self._model = str(answer.get("model") or model or "") or None
        # Where Codex writes the thread (it creates the file with the first turn).
        path = started.get("path") if isinstance(started, dict) else None
        found = sessions.find_thread_file(self._thread, self._env)
        return LiveState(
            session_id=self._thread,
            session_file=str(path) if isinstance(path, str) else str(found) if found else None,
            provider=PROVIDER,
            model=self._model,
            message_count=1 if thread else 0,
        )

    async def switch_session(self, session_file: str) -> LiveState:
        """Refused: one app-server serves one conversation's thread."""
        raise LiveError("could not switch: one Codex serves one thread", "switch_session", kind="refused")

    async def set_model(self, provider: str, model: str) -> None:
        """The next ``turn/start`` names this model."""
        self._model = model

    async def set_thinking(self, level: str) -> None:
        """Nothing: no effort is mapped yet."""

    async def available_models(self) -> tuple[ModelChoice, ...]:
        """The model the thread runs (Codex's list is not read yet)."""
        return (ModelChoice(PROVIDER, self._model, self._model),) if self._model else ()

    async def thinking_levels(self) -> list[str]:
        """None mapped yet."""
        return []

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> PendingCommand:
        """``turn/start`` now; `delivered` waits until Codex read it. Images go first, as data
        URLs (its `image` input: no file the bridge would have to write and clean up)."""
        inputs: list[dict[str, Any]] = [
            {"type": "image", "url": f"data:{i.mime_type};base64,{i.data}"} for i in images
        ]
        inputs.append({"type": "text", "text": text})
        params: dict[str, Any] = {"threadId": self._thread, "input": inputs}
        if self._model:
            params["model"] = self._model
        self._end = _BARE_END
        self._usage = None
        return self._request_now("turn/start", params)

    async def delivered(self, pending: LiveCommand, timeout: float | None = None) -> dict[str, Any]:
        """Wait until Codex accepted the turn (its answer names the turn, needed to interrupt it)."""
        answer = await self.answer(pending, timeout)
        turn = answer.get("turn")
        if isinstance(turn, dict) and turn.get("id"):
            self._turn = str(turn["id"])
        return answer

    async def request(
        self, name: str, params: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Send one request and wait (bounded) for its answer."""
        return await self.answer(self._request_now(name, params), timeout)

    async def steer(self, text: str) -> None:
        """Refused: not mapped yet."""
        raise LiveError("Codex takes no steering here", "steer", kind="refused")

    def send_abort_now(self) -> PendingCommand:
        """``turn/interrupt`` now; its answer (the turn ended) is awaited with `answer`."""
        return self._as_interrupt(
            self._request_now("turn/interrupt", {"threadId": self._thread, "turnId": self._turn})
        )

    async def commands(self) -> list[AgentCommand]:
        """None read yet."""
        return []

    async def run_command(self, command: BridgeCommand) -> CommandDone:
        """Refused: not mapped yet."""
        raise LiveError(f"/{command.name} is not mapped for Codex", f"/{command.name}", kind="refused")

    async def rename(self, title: str) -> None:
        """Refused: not mapped yet."""
        raise LiveError("Codex's threads take no title here", "rename", kind="refused")

    async def clone(self) -> LiveState:
        """Refused: not mapped yet."""
        raise LiveError("Codex's threads are not forked here", "clone", kind="refused")

    async def fork_before(self, prompt: str, ordinal: int) -> LiveState:
        """Refused: not mapped yet."""
        raise LiveError("Codex's threads are not forked here", "fork", kind="refused")

    # ------------------------------------------------------------------ writing

    # ------------------------------------------------------------------ reading

    def _dispatch(self, lines: list[bytes]) -> None:
        self.lines_read += len(lines)
        events: list[bytes] = []
        for line in lines:
            try:
                message = orjson.loads(line) if line else None
            except orjson.JSONDecodeError:
                events.append(line)  # the mapper counts what it cannot read
                continue
            if not isinstance(message, dict):
                continue
            if "method" not in message and "id" in message:
                self._deliver(str(message["id"]), message)
            elif "method" in message and "id" in message:
                self._asked(message)
            elif "method" in message:
                events += self._event_lines(str(message["method"]), message.get("params") or {})
        listener = self.listener
        if events and listener is not None:
            listener(events)

    async def _mcp_servers_started(self) -> None:
        """Wait (bounded) until Codex reported each MCP server ready or failed: its first turn
        otherwise starts without the tools of a server still starting."""
        if not self._mcp_starting:
            return
        with anyio.move_on_after(MCP_PROMPT_ACCEPT_SECONDS):
            if self._mcp_started is not None:
                await self._mcp_started.wait()
        if self._mcp_starting:
            log.warning("Codex's MCP servers %s did not start in time", sorted(self._mcp_starting))

    def _mcp_status(self, params: dict[str, Any]) -> None:
        if params.get("status") in ("ready", "failed", "cancelled") and self._mcp_starting:
            self._mcp_starting.discard(str(params.get("name")))
            if not self._mcp_starting and self._mcp_started is not None:
                self._mcp_started.set()

    def _event_lines(self, method: str, params: dict[str, Any]) -> list[bytes]:
        """A notification as the exec lines the mapper reads (none for bookkeeping)."""
        if method == "mcpServer/startupStatus/updated":
            self._mcp_status(params)
            return []
        if method == "item/agentMessage/delta":
            return [orjson.dumps({"type": "message.delta", "delta": params.get("delta", "")})]
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            if not isinstance(item, dict) or item.get("type") in ("userMessage", "agentMessage"):
                return []
            kind = "item.started" if method == "item/started" else "item.completed"
            return [orjson.dumps({"type": kind, "item": _snake(item)})]
        if method == "thread/tokenUsage/updated":
            usage = params.get("tokenUsage")
            last = usage.get("last") if isinstance(usage, dict) else None
            self._usage = last if isinstance(last, dict) else None
            return []
        if method == "turn/completed":
            return [self._turn_over(params.get("turn"))]
        return []

    def _turn_over(self, turn: object) -> bytes:
        turn = turn if isinstance(turn, dict) else {}
        error = turn.get("error")
        if turn.get("status") == "failed":
            message = error.get("message") if isinstance(error, dict) else "Codex's turn failed"
            line = orjson.dumps({"type": "turn.failed", "error": {"message": message}})
        else:
            raw = self._usage or {}
            usage = {
                "input_tokens": raw.get("inputTokens", 0),
                "output_tokens": raw.get("outputTokens", 0),
                "cached_input_tokens": raw.get("cachedInputTokens", 0),
            }
            line = orjson.dumps({"type": "turn.completed", "usage": usage})
        self._end = line
        interrupting, self._interrupting = self._interrupting, None
        if interrupting is not None:
            interrupting.response = {"result": {}}
            interrupting.answered.set()
        return line

    def _asked(self, message: dict[str, Any]) -> None:
        """A server request: an approval goes to the run's permission gate; anything else is
        answered as unsupported."""
        request_id = str(message["id"])
        method = str(message["method"])
        given = message.get("params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        kind = _APPROVALS.get(method)
        mcp_call = _mcp_tool_call(method, params)
        if kind is None and mcp_call is None:
            log.info("Codex asked %s: not supported, refused", method)
            error = {"code": -32601, "message": f"{method} is not supported by pi-bridge"}
            self._write_quietly(orjson.dumps({"id": message["id"], "error": error}) + b"\n")
            return
        if request_id in self._open_checks:
            return
        self._open_checks.add(request_id)
        if mcp_call is not None:
            self._check(request_id, message["id"], mcp_call, _elicitation_answer)
            return
        command = params.get("command")
        text = (
            " ".join(command) if isinstance(command, list) else command if isinstance(command, str) else None
        )
        check = ToolCheck(
            tool_call_id=str(params.get("itemId") or request_id),
            tool="exec_command" if kind == "execute" else "apply_patch",
            kind="execute" if kind == "execute" else "edit",
            input=dict(params),
            command=text,
        )
        self._check(request_id, message["id"], check, _decision)

    def _check(
        self, key: str, request_id: object, check: ToolCheck, answer: Callable[[object, ToolVerdict], bytes]
    ) -> None:
        """The run's permission gate decides `check`; `answer` writes its verdict back."""
        asks, tasks = self.asks, self._tasks
        if asks is None or tasks is None:
            self._settle(key, answer(request_id, ToolVerdict(allow=False)))
            return
        tasks.start_soon(self._decide, key, check, asks, partial(answer, request_id))


def _header_size(path: str) -> int:
    """The bytes of a rollout's leading ``session_meta`` lines."""
    size = 0
    with open(path, "rb") as handle:
        for line in handle:
            if b'"type":"session_meta"' not in line[:200]:
                break
            size += len(line)
    return size


def mcp_settings(
    servers: Sequence[McpServerStdio | McpServerHttp], config: str
) -> dict[str, str | list[str]]:
    """The conversation's MCP servers as Codex's `mcp_servers.<name>` settings: a stdio server
    started by mcp_exec.py from the private file (its env never in argv), an http one by its URL
    (one with headers is refused by `CodexLive.prepare`: they would be in argv)."""
    found: dict[str, str | list[str]] = {}
    for server in servers:
        key = f"mcp_servers.{server.name}"
        if isinstance(server, McpServerHttp):
            if not server.headers:
                found[f"{key}.url"] = server.url
            continue
        found[f"{key}.command"] = sys.executable
        found[f"{key}.args"] = ["-I", "-S", mcp_exec.__file__, config, server.name]
    return found


def _launch_settings(argv: Sequence[str]) -> dict[str, str]:
    """The string ``-c key="value"`` settings of a launch's argv."""
    found: dict[str, str] = {}
    for flag, setting in itertools.pairwise(argv):
        key, _, raw = setting.partition("=")
        if flag == "-c" and raw:
            with contextlib.suppress(ValueError):
                value = json.loads(raw)
                if isinstance(value, str):
                    found[key] = value
    return found


def _mcp_names(argv: Sequence[str]) -> set[str]:
    """The MCP servers a launch's ``-c mcp_servers.<name>.*`` settings name."""
    names = set()
    for flag, setting in itertools.pairwise(argv):
        key = setting.partition("=")[0]
        if flag == "-c" and key.startswith("mcp_servers.") and key.count(".") == 2:
            names.add(key.split(".")[1])
    return names


def _headed_http_servers(config: str | None) -> list[str]:
    """The http servers with headers in the conversation's MCP file (see `mcp_settings`)."""
    if not config:
        return []
    try:
        listed = json.loads(pathlib.Path(config).read_bytes()).get("mcpServers") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [
        str(n)
        for n, e in listed.items()
        if isinstance(e, dict) and e.get("type") == "http" and e.get("headers")
    ]


def _bytes_before(path: str, mark: int) -> int:
    """The bytes of a rollout's lines stamped before `mark` (ms since the epoch): up to the first
    line stamped at or after it (a line without a stamp stays with those before it)."""
    size = 0
    with open(path, "rb") as handle:
        for line in handle:
            stamp = _stamp_ms(line)
            if stamp is not None and stamp >= mark:
                break
            size += len(line)
    return size


def _stamp_ms(line: bytes) -> int | None:
    """A rollout line's ``timestamp`` (``2026-12-06T09:24:44.224Z``) in ms, None without one."""
    try:
        stamp = orjson.loads(line).get("timestamp")
        moment = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except (orjson.JSONDecodeError, AttributeError, ValueError):
        return None
    return int(moment.timestamp() * 1000)


def _mcp_tool_call(method: str, params: dict[str, Any]) -> ToolCheck | None:
    """Codex's approval of an MCP tool call (an elicitation marked `mcp_tool_call`) as the
    run's check of `mcp__<server>__<tool>`; None for anything else."""
    meta = params.get("_meta")
    if method != "mcpServer/elicitation/request" or not isinstance(meta, dict):
        return None
    if meta.get("codex_approval_kind") != "mcp_tool_call":
        return None
    arguments = meta.get("tool_params")
    return ToolCheck(
        tool_call_id=str(params.get("turnId") or ""),
        tool=f"mcp__{params.get('serverName')}__{meta.get('tool_name')}",
        kind="other",
        input=arguments if isinstance(arguments, dict) else {},
    )


def _elicitation_answer(request_id: object, verdict: ToolVerdict) -> bytes:
    """The answer to an MCP tool call's approval: accepted once, or declined."""
    action = {"action": "accept", "content": {}} if verdict.allow else {"action": "decline"}
    return orjson.dumps({"id": request_id, "result": action}) + b"\n"


def _decision(request_id: object, verdict: ToolVerdict) -> bytes:
    """The answer to an approval request."""
    decision = "accept" if verdict.allow else "decline"
    return orjson.dumps({"id": request_id, "result": {"decision": decision}}) + b"\n"


class CodexLiveMode:
    """Codex's `LiveMode`: one ``codex app-server`` per conversation."""

    def launch_spec(
        self, command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
    ) -> LaunchSpec:
        """``codex app-server`` with the sandbox and model as ``-c`` settings, and the thread to
        resume (read back from argv by `CodexLive.prepare`)."""
        settings: dict[str, str | list[str]] = {"sandbox_mode": sandbox_mode(options.sandbox)}
        if options.model:
            settings["model"] = options.model
        if options.session_id:
            settings[THREAD_SETTING] = options.session_id
        if options.mcp_config:
            settings[MCP_SETTING] = options.mcp_config
            settings.update(mcp_settings(options.mcp_servers, options.mcp_config))
        flags = [part for key, value in settings.items() for part in ("-c", f"{key}={json.dumps(value)}")]
        return LaunchSpec(argv=(*command, "app-server", *flags), cwd=options.cwd)

    def client(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> CodexLive:
        """The client of an app-server just spawned."""
        return CodexLive(child, wait_writable=wait_writable)

    def event_kind(self, line: bytes) -> EventKind | None:
        """The turn's end settles it."""
        return "settled" if line.startswith(_TURN_END) else None

    def user_text(self, line: bytes) -> str | None:
        """None: the prompt's echo is not passed on."""
        return None

    def latest_session_id(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """None: continuing the newest thread is not mapped."""
        return None

    def session_stored(self, session_id: str, cwd: str, env: Mapping[str, str]) -> bool:
        """Whether Codex has written the thread."""
        return sessions.find_thread_file(session_id, env) is not None

    def session_file(self, session_id: str, cwd: str, env: Mapping[str, str]) -> str | None:
        """The thread's rollout file, if stored."""
        path = sessions.find_thread_file(session_id, env)
        return str(path) if path is not None else None

    def session_mark(self, path: str | None) -> int | None:
        """The wall clock now, in milliseconds: Codex stamps every rollout line, and may still be
        writing the turn before when the next prompt starts, so a size taken now could cut it."""
        return time.time_ns() // 1_000_000

    def cut_session_back(self, path: str, mark: int | None) -> None:
        """Cut the rollout back before its first line stamped at or after `mark`; None (no
        mark): back to its ``session_meta`` header, so the thread resumes with no turn."""
        with contextlib.suppress(OSError):
            keep = _header_size(path) if mark is None else _bytes_before(path, mark)
            if os.path.getsize(path) > keep:
                os.truncate(path, keep)

    def classify_exit(
        self, exit_code: int | None, signal_name: str | None, stderr: str
    ) -> tuple[ErrorKind, bool]:
        """Codex's exit classification."""
        return classify_exit(exit_code, stderr)

    def lacks_live_mode(self, stderr: str) -> bool:
        """A Codex without ``app-server`` says so."""
        return "app-server" in stderr and ("unrecognized" in stderr or "unexpected" in stderr)

    def silence_may_mean_no_live_mode(self) -> bool:
        """A Codex without app-server exits with a usage error: a silent one is slow."""
        return False
