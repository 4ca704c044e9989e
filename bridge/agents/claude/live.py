"""Claude Code's live mode: one `claude -p --input-format stream-json` process per conversation."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import orjson

from bridge.agents.claude import sessions
from bridge.agents.claude.command import PermissionMode, claude_env, model_and_tool_flags
from bridge.agents.claude.dialogs import ASK_USER_TOOL
from bridge.agents.claude.dialogs import ask as ask_questions
from bridge.agents.claude.errors import classify_exit
from bridge.agents.claude.sandbox import SANDBOX_DIR_ENV, UNREADABLE, confine, read_sandbox
from bridge.agents.claude.sandbox import SETTINGS as SANDBOX_SETTINGS
from bridge.agents.claude.tool_checks import WEB_TOOL_HOOKS, answer_line, hook_answer_line, tool_check
from bridge.agents.claude.trust import trust_flags
from bridge.agents.live_client import LiveClientBase
from bridge.agents.live_reader import PendingCommand
from bridge.agents.values import (
    GATE_DIR_ENV,
    AgentCommand,
    AskDialog,
    BridgeCommand,
    CommandDone,
    EventKind,
    LaunchSpec,
    LiveError,
    LiveErrorKind,
    LiveState,
    ModelChoice,
    RunOptions,
    ToolVerdict,
)
from bridge.config import env_number
from bridge.contract import ErrorKind, PromptImage
from bridge.process.spawn import ChildProcess

log = logging.getLogger(__name__)

LIVE_FLAGS: Final = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
)
#: How long Claude Code's first `initialize` may take: its start (a large binary, and the MCP
#: servers it connects) is far slower than a command, most of all on a busy machine, and a start
#: taken for silence would run the conversation one spawn per prompt.
START_TIMEOUT_ENV: Final = "PI_BRIDGE_CLAUDE_START_TIMEOUT"


def start_timeout() -> float:
    """The bound of the start ($PI_BRIDGE_CLAUDE_START_TIMEOUT, else 60 s), read at each start."""
    return env_number(START_TIMEOUT_ENV, 60.0)


#: Claude Code's name for the model it runs when none is chosen (its `initialize` lists it).
DEFAULT_MODEL: Final = "default"
#: The provider every Claude Code model is of (the endpoint comes from the environment).
PROVIDER: Final = "anthropic"
_PROMPT_TOOL: Final = "--permission-prompt-tool"
_CONTROL_RESPONSE: Final = b'{"type":"control_response"'
_CONTROL_REQUEST: Final = b'{"type":"control_request"'
_RESULT: Final = b'{"type":"result"'
# What ends a run for the mapper when no `result` line was read (never, once a turn settled).
_BARE_RESULT: Final = b'{"type":"result","subtype":"success","is_error":false}'


class ClaudeLiveError(LiveError):
    """A control request Claude Code refused, did not answer in time, or could not take."""

    def __init__(self, command: str, reason: str, *, kind: LiveErrorKind) -> None:
        super().__init__(f"Claude Code's `{command}` {reason}", command, kind=kind)


def live_flags(
    options: RunOptions,
    permission_mode: PermissionMode,
    allowed_tools: tuple[str, ...],
    session: tuple[str, str],
) -> list[str]:
    """The flags of a live Claude Code: stream-json both ways, its tools, model and session.

    `permission_mode` `plan` and `bypassPermissions` are Claude Code's own; any other runs in
    `default` with the prompt tool, so every call Claude Code would ask about is the bridge's to
    decide (its permission modes, rules and the user). A sandboxed one asks about every call
    (sandbox.py), so that each is confined.
    """
    flags = [*LIVE_FLAGS]
    if permission_mode in ("plan", "bypassPermissions"):
        flags += ["--permission-mode", permission_mode]
    else:
        flags += ["--permission-mode", "default", _PROMPT_TOOL, "stdio"]
        if options.sandbox is not None and options.sandbox.mode != "off":
            flags += ["--settings", SANDBOX_SETTINGS]
    flags += trust_flags(options.trusted, options.cwd)
    return [*flags, *model_and_tool_flags(options, allowed_tools), *session]


def _session_of(argv: Sequence[str]) -> tuple[str | None, bool]:
    """The session a live Claude Code was started on, and whether it resumes a stored one."""
    for flag, resumed in (("--resume", True), ("--session-id", False)):
        if flag in argv[:-1]:
            return argv[list(argv).index(flag) + 1], resumed
    return None, False


def _model_of(argv: Sequence[str]) -> str | None:
    return argv[list(argv).index("--model") + 1] if "--model" in argv[:-1] else None


def slash_commands(listed: object) -> tuple[AgentCommand, ...]:
    """`initialize`'s commands as the seam's (one without a usable name is skipped)."""
    found: list[AgentCommand] = []
    for entry in listed if isinstance(listed, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or len(name) > 128 or any(c.isspace() for c in name):
            continue
        description, hint = entry.get("description"), entry.get("argumentHint")
        found.append(
            AgentCommand(
                name=name.lstrip("/"),
                description=description[:500] if isinstance(description, str) else "",
                source="extension",
                argument_hint=hint[:200] if isinstance(hint, str) and hint else None,
            )
        )
    return tuple(found)


class ClaudeLive(LiveClientBase):
    """The client side of one live Claude Code process (its own tools do their own I/O: no
    `file_ops`; its interrupt is done when the turn's `result` line came)."""

    who = "Claude Code"

    def __init__(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        super().__init__(child, wait_writable=wait_writable)
        self._result = _BARE_RESULT
        self._models: tuple[ModelChoice, ...] = ()
        self._commands: tuple[AgentCommand, ...] = ()
        self._env: Mapping[str, str] = {}
        self._session_id, _ = _session_of(child.argv)
        # Claude Code's permission mode now: the bridge's `plan` is Claude Code's own (the model
        # then plans and asks before any change); every other mode is `default`, the bridge
        # deciding each call it asks about. None: it was started in a mode of its own.
        self._permission_mode: str | None = "default" if _PROMPT_TOOL in child.argv else None
        # Whether it asks before every tool call, so that a sandbox confines each one.
        self._asks_every_call = _PROMPT_TOOL in child.argv and SANDBOX_SETTINGS in child.argv

    # ------------------------------------------------------------------ the seam

    def _error(self, command: str, reason: str, *, kind: LiveErrorKind) -> LiveError:
        return ClaudeLiveError(command, reason, kind=kind)

    def _reply_data(self, command: str, response: dict[str, Any]) -> dict[str, Any]:
        """A control response's `response` ({} if none); raises unless its subtype is success."""
        if response.get("subtype") != "success":
            raise self._refuse(command, f"was refused: {response.get('error') or 'no reason given'}")
        answer = response.get("response")
        return answer if isinstance(answer, dict) else {}

    @property
    def asks_before_changes(self) -> bool:
        """Claude Code asks before an edit, a write or a command, unless started in a mode of its own."""
        return self._permission_mode is not None

    @property
    def run_end_line(self) -> bytes:
        """The turn's own `result` line: its usage, stop reason and error."""
        return self._result

    async def prepare(self) -> LiveState:
        """`initialize` (its answer proves Claude Code speaks stream-json and lists its models);
        the session is the one the process was started on."""
        hooks = {"hooks": WEB_TOOL_HOOKS} if self._permission_mode is not None else {}
        answer = await self.request("initialize", hooks, timeout=start_timeout())
        listed = answer.get("models")
        self._models = tuple(
            ModelChoice(PROVIDER, str(m["value"]), str(m.get("displayName") or m["value"]))
            for m in (listed if isinstance(listed, list) else [])
            if isinstance(m, dict) and m.get("value")
        )
        self._commands = slash_commands(answer.get("commands"))
        self._env = self.child.env
        session_id, resumed = _session_of(self.child.argv)
        return LiveState(
            session_id=session_id,
            session_file=self._session_file(session_id),
            provider=PROVIDER,
            # What it runs: the model it was started with, else its configured or default one.
            model=_model_of(self.child.argv) or self._env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL,
            message_count=1 if resumed else 0,
        )

    def _session_file(self, session_id: str | None) -> str | None:
        """Where Claude Code stores the session (it writes the file with the first prompt)."""
        if session_id is None:
            return None
        folder = sessions.config_dir(self._env) / "projects" / sessions.project_folder(self._cwd())
        return str(folder / f"{session_id}.jsonl")

    async def switch_session(self, session_file: str) -> LiveState:
        """Refused: a running Claude Code cannot load another session (a process `--resume`s it)."""
        raise ClaudeLiveError("switch_session", "is not something Claude Code can do", kind="refused")

    async def set_model(self, provider: str, model: str) -> None:
        """Write `set_model` ahead of the next prompt (Claude Code answers it with that prompt)."""
        self.send_now("set_model", {"model": model})

    async def set_thinking(self, level: str) -> None:
        """Nothing: the effort is a flag of the process (`--effort`, from the run that started it),
        and Claude Code's control protocol has no request to change it."""

    async def available_models(self) -> tuple[ModelChoice, ...]:
        """The models `initialize` listed."""
        return self._models

    async def thinking_levels(self) -> list[str]:
        """None: Claude Code takes no thinking level."""
        return []

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> PendingCommand:
        """Write the prompt as a `user` line now; `delivered` waits until Claude Code read it."""
        content: str | list[dict[str, Any]] = text
        if images:
            content = [
                *(
                    {"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}
                    for i in images
                ),
                {"type": "text", "text": text},
            ]
        line = {
            "type": "user",
            "message": {"role": "user", "content": content},
            "parent_tool_use_id": None,
            "session_id": "",
        }
        self._follow_the_gate()
        if not self._asks_every_call and read_sandbox(self._env, self._session_id) is not None:
            # started without a sandbox, it runs what it judges read-only unasked: unconfined
            raise ClaudeLiveError(
                "prompt",
                "cannot be sandboxed: this Claude Code was started without a sandbox (start a new "
                "conversation with the sandbox on)",
                kind="refused",
            )
        self._write("prompt", orjson.dumps(line) + b"\n")
        return PendingCommand("prompt", "")

    def _follow_the_gate(self) -> None:
        """Claude Code's permission mode for the conversation's mode now, written ahead of the
        prompt when it changes (the bridge's gate keeps a small file per conversation)."""
        gate_dir = self._env.get(GATE_DIR_ENV)
        if self._permission_mode is None or not gate_dir or not self._session_id:
            return
        try:
            bridge_mode = (Path(gate_dir) / self._session_id).read_text().strip()
        except OSError:
            bridge_mode = "full"  # no file: the conversation is in `full`
        wanted = "plan" if bridge_mode == "plan" else "default"
        if wanted != self._permission_mode:
            self.send_now("set_permission_mode", {"mode": wanted})
            self._permission_mode = wanted

    async def request(
        self, name: str, fields: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Send one control request and wait (bounded) for its answer."""
        return await self._sent_and_answered(self.send_now(name, fields), timeout)

    async def steer(self, text: str) -> None:
        """Refused: a user line written mid-turn is a turn of its own to Claude Code."""
        raise ClaudeLiveError("steer", "is not something Claude Code can do mid-turn", kind="refused")

    def send_abort_now(self) -> PendingCommand:
        """Write `interrupt` now; its answer (the turn ended) is awaited with `answer`."""
        return self._as_interrupt(self.send_now("interrupt", {}))

    async def commands(self) -> list[AgentCommand]:
        """The slash commands `initialize` listed (Claude Code's custom commands and skills)."""
        return list(self._commands)

    async def run_command(self, command: BridgeCommand) -> CommandDone:
        """Refused: Claude Code's control protocol has no compaction, title or export request."""
        raise ClaudeLiveError(
            f"/{command.name}", "is not something Claude Code's control protocol offers", kind="refused"
        )

    async def clone(self) -> LiveState:
        """Refused: a running Claude Code cannot copy its session (a new process would
        `--fork-session`)."""
        raise ClaudeLiveError("clone", "is not something a running Claude Code can do", kind="refused")

    async def fork_before(self, prompt: str, ordinal: int) -> LiveState:
        """Refused: a running Claude Code cannot fork its session (a new process would
        `--resume-session-at` one of its messages)."""
        raise ClaudeLiveError("fork", "is not something a running Claude Code can do", kind="refused")

    async def rename(self, title: str) -> None:
        """Refused: Claude Code's sessions have no title the bridge can set."""
        raise ClaudeLiveError("rename", "is not something Claude Code can do", kind="refused")

    # ------------------------------------------------------------------ writing

    def send_now(self, name: str, fields: dict[str, Any]) -> PendingCommand:
        """Write a control request now (from a synchronous callback too)."""
        pending = PendingCommand(name, f"b{uuid.uuid4().hex[:12]}")
        request = {
            "type": "control_request",
            "request_id": pending.command_id,
            "request": {"subtype": name, **fields},
        }
        return self._send_line(pending, orjson.dumps(request) + b"\n")

    # ------------------------------------------------------------------ reading

    def _dispatch(self, lines: list[bytes]) -> None:
        self.lines_read += len(lines)
        events: list[bytes] = []
        for line in lines:
            if not line:
                continue
            if line.startswith(_CONTROL_RESPONSE) and self._answer(line):
                continue
            if line.startswith(_CONTROL_REQUEST) and self._asked(line):
                continue
            if line.startswith(b'{"type":"user"') and b'"isReplay":true' in line:
                continue  # the echo of a command (`set_model`), not the run's
            if line.startswith(_RESULT):
                self._result = line
                self._turn_over()
            events.append(line)
        listener = self.listener
        if events and listener is not None:
            listener(events)

    def _turn_over(self) -> None:
        interrupting, self._interrupting = self._interrupting, None
        if interrupting is not None:
            interrupting.response = {"subtype": "success"}
            interrupting.answered.set()

    def _answer(self, line: bytes) -> bool:
        try:
            response = orjson.loads(line).get("response")
        except (orjson.JSONDecodeError, AttributeError):
            return False
        if not isinstance(response, dict):
            return False
        request_id = str(response.get("request_id"))
        interrupting = self._interrupting
        if interrupting is not None and interrupting.command_id == request_id:
            if response.get("subtype") != "success":  # refused: no turn to end
                self._interrupting = None
                interrupting.response = response
                interrupting.answered.set()
            return True
        self._deliver(request_id, response)
        return True

    def _asked(self, line: bytes) -> bool:
        """Claude Code asks before a tool call: the run's permission check decides (none
        listening: denied, so nothing runs unasked). Other requests are not the run's events."""
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        request = message.get("request") if isinstance(message, dict) else None
        request_id = message.get("request_id") if isinstance(message, dict) else None
        if not isinstance(request, dict) or not isinstance(request_id, str):
            return False
        if request.get("subtype") != "can_use_tool":
            self._answer_other(request_id, request)
            return True
        if request_id in self._open_checks:
            return True
        self._open_checks.add(request_id)
        if request.get("tool_name") == ASK_USER_TOOL:
            self._put_questions(request_id, request)
            return True
        check, asks, tasks = tool_check(request), self.asks, self._tasks
        given = request.get("input")
        arguments: dict[str, Any] = given if isinstance(given, dict) else {}
        if check is None or asks is None or tasks is None:
            reason = "not a tool call the bridge can read" if check is None else "no run is listening"
            self._settle_check(request_id, ToolVerdict(allow=False, reason=f"denied: {reason}"), arguments)
            return True
        runs_as = arguments
        box = read_sandbox(self._env, self._session_id)
        if box is None and self._asks_every_call and SANDBOX_DIR_ENV not in self._env:
            # started for a sandbox whose file it cannot find: nothing runs unconfined
            box = UNREADABLE
        if box is not None:
            # the sandbox first: what it refuses is never asked about; what it allows runs confined
            confined = confine(check.tool, arguments, box)
            if confined.refused is not None:
                self._settle_check(request_id, ToolVerdict(allow=False, reason=confined.refused), arguments)
                return True
            runs_as = confined.input
        tasks.start_soon(
            self._decide, request_id, check, asks, partial(answer_line, request_id, tool_input=runs_as)
        )
        return True

    def _answer_other(self, request_id: str, request: dict[str, Any]) -> None:
        """A control request that is no tool call: the web tools' hook answers "ask" (so the call
        comes as `can_use_tool`); anything else is answered as unsupported."""
        hooked = hook_answer_line(request_id, request) if request.get("subtype") == "hook_callback" else None
        if hooked is not None:
            self._write_quietly(hooked)
            return
        log.info("Claude Code's control request %r answered as unsupported", request.get("subtype"))
        error = {"subtype": "error", "request_id": request_id, "error": "not supported by pi-bridge"}
        self._write_quietly(orjson.dumps({"type": "control_response", "response": error}) + b"\n")

    def _put_questions(self, request_id: str, request: dict[str, Any]) -> None:
        """Claude Code's AskUserQuestion: each question a select dialog for the user (the run's
        `dialogs`); the answers go back as the call's input, a question left unanswered denies it."""
        given = request.get("input")
        arguments: dict[str, Any] = given if isinstance(given, dict) else {}
        dialogs, tasks = self.dialogs, self._tasks
        if dialogs is None or tasks is None:
            self._settle_check(
                request_id, ToolVerdict(allow=False, reason="denied: no one to ask"), arguments
            )
            return
        tasks.start_soon(self._ask_user, request_id, arguments, dialogs)

    async def _ask_user(self, request_id: str, arguments: dict[str, Any], dialogs: AskDialog) -> None:
        self._deciding += 1
        try:
            answers = await ask_questions(arguments, dialogs)
        except Exception:
            log.exception("Claude Code: asking the user its questions failed")
            answers = None
        finally:
            self._deciding -= 1
            self.reading_since = time.monotonic()
        if answers is None:
            verdict = ToolVerdict(allow=False, reason="the user gave no answer")
            self._settle_check(request_id, verdict, arguments)
            return
        self._settle_check(request_id, ToolVerdict(allow=True), {**arguments, "answers": answers})

    def _settle_check(self, request_id: str, verdict: ToolVerdict, arguments: dict[str, Any]) -> None:
        self._settle(request_id, answer_line(request_id, verdict, tool_input=arguments))


def event_kind(line: bytes) -> EventKind | None:
    """The `result` line is the turn's end: Claude Code takes nothing more until the next prompt."""
    return "settled" if line.startswith(_RESULT) else None


class ClaudeLiveMode:
    """Claude Code's `LiveMode`: one stream-json process per conversation, prompt after prompt."""

    def __init__(self, permission_mode: PermissionMode, allowed_tools: tuple[str, ...]) -> None:
        self.permission_mode: PermissionMode = permission_mode
        self.allowed_tools = allowed_tools

    def launch_spec(
        self, command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
    ) -> LaunchSpec:
        """A live Claude Code: a stored session `--resume`d, any other started under an id the
        bridge names (`new_session_id`, else a fresh one)."""
        if options.session_id:
            session = ("--resume", options.session_id)
        else:
            session = ("--session-id", new_session_id or str(uuid.uuid4()))
        flags = live_flags(options, self.permission_mode, self.allowed_tools, session)
        return LaunchSpec(argv=(*command, *flags), cwd=options.cwd, env=claude_env(options))

    def client(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> ClaudeLive:
        """The client of a Claude Code just spawned."""
        return ClaudeLive(child, wait_writable=wait_writable)

    #: The turn's `result` line settles it; every other line goes to the mapper.
    event_kind = staticmethod(event_kind)

    def user_text(self, line: bytes) -> str | None:
        """None: Claude Code does not echo the prompt (and takes no steering)."""
        return None

    def latest_session_id(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """The newest session of `cwd` (what `--continue` would open)."""
        found = sessions.checkpoint(RunOptions(prompt="", cwd=cwd, continue_session=True), env)
        return found.session_id if found is not None else None

    def session_stored(self, session_id: str, cwd: str, env: Mapping[str, str]) -> bool:
        """Whether Claude Code has written session `session_id`."""
        return sessions.find_session_file(session_id, env) is not None

    def session_file(self, session_id: str, cwd: str, env: Mapping[str, str]) -> str | None:
        """The file of session `session_id`, if it is stored."""
        path = sessions.find_session_file(session_id, env)
        return str(path) if path is not None else None

    def session_mark(self, path: str | None) -> int | None:
        """The wall clock now, in milliseconds: Claude Code stamps every entry it appends, but
        writes them lazily, so a size taken now can miss the end of the turn before."""
        return time.time_ns() // 1_000_000

    def cut_session_back(self, path: str, mark: int | None) -> None:
        """Cut a session back before its first entry stamped at or after `mark`; a session left
        with nothing (or `mark` None) is removed, and the next process starts it again."""
        target = Path(path)
        with contextlib.suppress(OSError):
            if not target.is_file():
                return
            keep = 0 if mark is None else sessions.bytes_before(target.read_bytes(), mark)
            if keep == 0:
                target.unlink()
            elif keep < target.stat().st_size:
                os.truncate(target, keep)

    def classify_exit(
        self, exit_code: int | None, signal_name: str | None, stderr: str
    ) -> tuple[ErrorKind, bool]:
        """Claude Code's exit classification."""
        return classify_exit(exit_code, stderr)

    def lacks_live_mode(self, stderr: str) -> bool:
        """Whether Claude Code says it takes no stream-json input."""
        lowered = stderr.lower()
        return "input-format" in lowered and ("unknown" in lowered or "invalid" in lowered)

    def silence_may_mean_no_live_mode(self) -> bool:
        """A Claude Code without stream-json input says so and exits: a silent one is slow."""
        return False
