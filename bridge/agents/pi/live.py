"""pi's `--mode rpc`: its command line, and a client for one long-lived pi process (pi's `LiveMode`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import orjson

from bridge.agents.live_client import LiveClientBase
from bridge.agents.live_reader import PendingCommand, own_command
from bridge.agents.mapping import json_object
from bridge.agents.pi.command import extension_flags, pi_env, pi_flags
from bridge.agents.pi.dialogs import dialog_of, reply_line
from bridge.agents.pi.errors import classify_exit, classify_refusal, lacks_rpc_mode
from bridge.agents.pi.session_paths import cwd_folder, session_exists, session_file, sessions_root
from bridge.agents.pi.sessions import session_file_size, trim_session_file
from bridge.agents.pi.tool_checks import (
    answer_line,
    command_op,
    file_op,
    fs_answer_line,
    is_command_request,
    is_fs_request,
    is_gate_request,
    tool_check,
)
from bridge.agents.pi.trust import trust_flags
from bridge.agents.seam import LiveCommand
from bridge.agents.values import (
    DIALOG_CANCELLED,
    AgentCommand,
    AskDialog,
    BridgeCommand,
    CommandDone,
    ContextUsage,
    Dialog,
    DoFileOp,
    EventKind,
    FileOp,
    FileOpResult,
    LaunchSpec,
    LiveError,
    LiveErrorKind,
    LiveState,
    ModelChoice,
    RunOptions,
    SessionStats,
    ToolCheck,
    ToolVerdict,
)
from bridge.config import env_number
from bridge.contract import PromptImage
from bridge.process.spawn import ChildProcess, environ_with
from bridge.process.trace import mark

log = logging.getLogger(__name__)
# What JavaScript's String.prototype.trim() removes (pi trims its json-mode prompt with it):
# Python's str.strip() would also take \x1c-\x1f and \x85, which pi keeps.
JS_WHITESPACE: Final = (
    " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)

#: How long a fresh pi's first command may take: it waits for Node's start-up, pi's extensions
#: and MCP servers, far slower than a command on a busy machine; a slow start taken for a stall
#: fails a prompt that a moment more would have run.
START_TIMEOUT_ENV: Final = "PI_BRIDGE_PI_START_TIMEOUT"


def start_timeout() -> float:
    """The bound of the start ($PI_BRIDGE_PI_START_TIMEOUT, else 60 s), read at each start."""
    return env_number(START_TIMEOUT_ENV, 60.0)


# A compaction waits on the model's summary: the run's own limits bound it, this only a lost answer.
COMPACT_TIMEOUT_SECONDS: Final = 3600.0
# An extension names its commands: one that could not be typed as `/name`, or a description
# past a line or two, is not the user's to see.
MAX_COMMAND_NAME: Final = 128
MAX_COMMAND_DESCRIPTION: Final = 500
_RESPONSE_MARK: Final = b'"type":"response"'
_UI_REQUEST_HEAD: Final = b'{"type":"extension_ui_request"'
_QUEUE_UPDATE_HEAD: Final = b'{"type":"queue_update"'
#: The commands whose answer may come after the queue change they made (pi queues, then answers).
_QUEUEING: Final = frozenset({"prompt", "steer", "follow_up"})
_NOTIFY: Final = b'"method":"notify"'
# The extension UI calls that block the extension until they are answered (pi's
# docs/rpc-extension-ui.md); the others (notify, setStatus...) expect no answer.
UI_DIALOGS: Final = frozenset({"select", "confirm", "input", "editor"})
# What ends a run for the mapper (pi's agent_end; the rpc engine holds it back until pi settles).
RUN_END_LINE: Final = b'{"type":"agent_end"}'
_TYPE_KEY: Final = b'"type":'
_KINDS: Final[tuple[tuple[bytes, EventKind | None], ...]] = (
    (b'"agent_settled"', "settled"),
    (b'"agent_end"', "run_end"),
    (b'"message_end"', None),
)


def event_kind(line: bytes) -> EventKind | None:
    """The events the rpc engine reads itself: "settled" (pi will not go on by itself), "run_end"
    (one low-level run ended; steering may follow), "user_message" (a user message taken into the
    run: the prompt, then steers); None for every other line (they go to the mapper)."""
    head = line[:48]
    if _TYPE_KEY not in head.replace(b" ", b""):
        return None
    for needle, kind in _KINDS:
        if needle in head:
            if kind is not None:
                return kind
            return "user_message" if _role_of(line) == "user" else None
    return None


def _role_of(line: bytes) -> str | None:
    if b'"user"' not in line[:96]:  # pi prints the role first: no need to parse an answer
        return None
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    message = event.get("message") if isinstance(event, dict) else None
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def user_text(line: bytes) -> str | None:
    """The text of a user message event."""
    try:
        content = orjson.loads(line)["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return "".join(
        part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
    )


class RpcError(LiveError):
    """A command pi refused (success false), did not answer in time, or could not take (closed)."""

    def __init__(self, command: str, reason: str, *, kind: LiveErrorKind) -> None:
        error_kind = classify_refusal(command, reason) if kind == "refused" else None
        super().__init__(f"pi's `{command}` command {reason}", command, kind=kind, error_kind=error_kind)


def live_state(state: dict[str, Any]) -> LiveState:
    """What pi reports of itself (`get_state`): its session, model, thinking and history."""
    sid, path = state.get("sessionId"), state.get("sessionFile")
    model = state.get("model")
    provider = model_id = None
    if isinstance(model, dict):  # what pi runs now; a run naming only a model keeps its provider
        provider, model_id = model.get("provider"), model.get("id")
    level, count = state.get("thinkingLevel"), state.get("messageCount")
    return LiveState(
        session_id=sid if isinstance(sid, str) else None,
        session_file=path if isinstance(path, str) else None,
        provider=provider if isinstance(provider, str) else None,
        model=model_id if isinstance(model_id, str) else None,
        thinking=level if isinstance(level, str) else None,
        message_count=count if isinstance(count, int) else None,
    )


def agent_commands(data: dict[str, Any]) -> list[AgentCommand]:
    """get_commands' answer as the seam's commands (an entry without a name is skipped)."""
    listed = data.get("commands")
    found: list[AgentCommand] = []
    for entry in listed if isinstance(listed, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or len(name) > MAX_COMMAND_NAME or _has_space(name):
            continue
        source = entry.get("source")
        description = entry.get("description")
        found.append(
            AgentCommand(
                name=name,
                description=description[:MAX_COMMAND_DESCRIPTION] if isinstance(description, str) else "",
                source=source if source in ("prompt", "skill") else "extension",
            )
        )
    return found


def unsent_texts(data: dict[str, Any]) -> list[str]:
    """clear_queue's answer as the texts pi had queued and not taken in: steers, then follow-ups."""
    texts: list[str] = []
    for key in ("steering", "followUp"):
        listed = data.get(key)
        if isinstance(listed, list):
            texts.extend(text for text in listed if isinstance(text, str))
    return texts


def fork_entry(messages: list[dict[str, Any]], text: str, ordinal: int) -> str | None:
    """The entry id of the conversation's `ordinal`-th user message if its text is `text`, else
    of the last one whose text is (a steering message or a compaction moves the count)."""
    entries = [(m.get("entryId"), m.get("text")) for m in messages]
    if ordinal < len(entries) and entries[ordinal][1] == text and isinstance(entries[ordinal][0], str):
        return entries[ordinal][0]
    for entry_id, said in reversed(entries):
        if said == text and isinstance(entry_id, str):
            return entry_id
    return None


def _has_space(text: str) -> bool:
    return any(char.isspace() for char in text)


def compacted(data: dict[str, Any]) -> CommandDone:
    """compact's answer as the run's text: the context's size before and after."""
    before, after = _number(data.get("tokensBefore"), int), _number(data.get("estimatedTokensAfter"), int)
    if before is None or after is None:
        return CommandDone("Compacted the conversation.")
    return CommandDone(f"Compacted the conversation: {before:,} → about {after:,} tokens.")


def session_stats(stats: dict[str, Any]) -> SessionStats:
    """pi's `get_session_stats`: the context window's use and the session's cost."""
    usage = stats.get("contextUsage")
    context = None
    if isinstance(usage, dict) and isinstance(usage.get("contextWindow"), int):
        tokens, percent = _number(usage.get("tokens"), int), _number(usage.get("percent"), float)
        context = ContextUsage(tokens=tokens, context_window=usage["contextWindow"], percent=percent)
    return SessionStats(context=context, cost=_number(stats.get("cost"), float))


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


def rpc_launch_spec(
    command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
) -> LaunchSpec:
    """The launch of a live pi for a conversation: rpc mode, its tools, cwd and session.

    Provider, model and thinking are set with commands between prompts, so they are not part of
    what makes two live pis interchangeable; the session to resume is (`--session`).
    """
    flags = [
        *pi_flags(options, live=True, new_session_id=new_session_id),
        *trust_flags(options.trusted),
        *extension_flags(),
    ]
    return LaunchSpec(argv=(*command, *flags), cwd=options.cwd, env=pi_env(options))


def latest_session_id(cwd: str, env: Mapping[str, str]) -> str | None:
    """The id of the newest session of `cwd` (what `--continue` would open), from the file names."""
    root, flat = sessions_root(environ_with(env))
    folder = root if flat else root / cwd_folder(cwd)
    if not folder.is_dir():
        return None
    names = sorted(path.name for path in folder.glob("*_*.jsonl"))
    if not names:
        return None
    return names[-1].rsplit(".", 1)[0].split("_", 1)[1]


def _names_queued(line: bytes) -> bool:
    """Whether a `queue_update` line names a queued message (one that cannot be read: assume so)."""
    try:
        update = orjson.loads(line)
    except orjson.JSONDecodeError:
        return True
    return bool(update.get("steering") or update.get("followUp")) if isinstance(update, dict) else True


class PiRpc(LiveClientBase):
    """The client side of one `pi --mode rpc` process."""

    run_end_line = RUN_END_LINE
    who = "pi"
    #: How many of pi's stdout lines were not JSON (counted per instance once one came).
    garbage = 0
    #: Whether pi's last `queue_update` named a queued steer or follow-up (pi prints one each
    #: time its queue changes, ahead of its answer to the command that queued).
    holds_queued = False

    def _error(self, command: str, reason: str, *, kind: LiveErrorKind) -> LiveError:
        return RpcError(command, reason, kind=kind)

    def _reply_data(self, command: str, response: dict[str, Any]) -> dict[str, Any]:
        """A response's `data` ({} if none); raises unless it says success."""
        if response.get("success") is not True:
            raise self._refuse(command, f"was refused: {response.get('error') or 'no reason given'}")
        data = response.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def asks_before_changes(self) -> bool:
        """pi's gate extension asks before every tool while the conversation's mode file says so."""
        return True

    # ------------------------------------------------------------------ commands

    async def request(
        self,
        command: dict[str, Any],
        timeout: float | None = None,
        *,
        on_sent: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Send one command and wait (bounded) for its answer; its `data` ({} if none).
        `on_sent` is called once the command is written, before its answer is awaited.

        Raises RpcError when pi refuses it, does not answer within `timeout` s, or is gone.
        """
        pending = await self.send(command, timeout)
        if on_sent is not None:
            on_sent()
        return await self.answer(pending, timeout)

    async def send(self, command: dict[str, Any], timeout: float | None = None) -> PendingCommand:
        """Write one command now; its answer is awaited with `answer`. Raises RpcError: closed,
        or timeout when pi has not read it within `timeout` s (a wedged pi, a big prompt)."""
        pending = self.send_now(command)
        await self._drain(pending, timeout)
        return pending

    def send_now(self, command: dict[str, Any]) -> PendingCommand:
        """`send` from a synchronous callback: the line is handed to pi's stdin before this
        returns (anything the pipe cannot take yet follows as it drains)."""
        pending = PendingCommand(str(command.get("type")), f"b{self._new_id()}")
        self._send_line(pending, orjson.dumps({**command, "id": pending.command_id}) + b"\n")
        mark("pi.stdin")
        return pending

    async def prepare(self) -> LiveState:
        """Configure a freshly started pi (single attempt: no retries of its own) and return its
        state; the first answer also proves it speaks rpc."""
        await self.request({"type": "set_auto_retry", "enabled": False}, start_timeout())
        return live_state(await self.request({"type": "get_state"}))

    async def set_model(self, provider: str, model: str) -> None:
        """Switch the model for the next prompt (no respawn)."""
        await self.request({"type": "set_model", "provider": provider, "modelId": model})

    async def set_thinking(self, level: str) -> None:
        """Set the thinking level for the next prompt."""
        await self.request({"type": "set_thinking_level", "level": level})

    async def available_models(self) -> tuple[ModelChoice, ...]:
        """get_available_models: every configured model that names its provider and id."""
        models = (await self.request({"type": "get_available_models"})).get("models")
        listed = [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []
        return tuple(
            ModelChoice(str(m.get("provider")), str(m.get("id")), str(m.get("name") or m.get("id")))
            for m in listed
            if m.get("provider") and m.get("id")
        )

    async def thinking_levels(self) -> list[str]:
        """get_available_thinking_levels: the levels the current model supports (["off"] if none)."""
        levels = (await self.request({"type": "get_available_thinking_levels"})).get("levels")
        return [level for level in levels if isinstance(level, str)] if isinstance(levels, list) else []

    def send_prompt_now(self, text: str, *, images: Sequence[PromptImage] = ()) -> PendingCommand:
        """Write a `prompt` now (its run streams as events); its acceptance is awaited with
        `delivered`. Raises RpcError (closed).

        Trimmed as pi's json mode trims its stdin prompt, so both engines send the model the same text.
        """
        command: dict[str, Any] = {"type": "prompt", "message": text.strip(JS_WHITESPACE)}
        if images:
            command["images"] = [
                {"type": "image", "data": image.data, "mimeType": image.mime_type} for image in images
            ]
        return self.send_now(command)

    async def delivered(self, command: LiveCommand, timeout: float | None = None) -> dict[str, Any]:
        """Wait (bounded) until pi has read a command written with `send_now` and answered it."""
        return await self._sent_and_answered(own_command(command), timeout)

    async def steer(self, text: str) -> None:
        """Queue a steering message for the running run."""
        await self.request({"type": "steer", "message": text})

    async def abort(self, timeout: float) -> None:
        """Abort the run; pi answers once it has settled."""
        await self.request({"type": "abort"}, timeout)

    def send_abort_now(self) -> PendingCommand:
        """Write `abort` now (from a synchronous callback too); its answer (pi has settled) is
        awaited later with `answer`."""
        return self.send_now({"type": "abort"})

    def send_clear_queue_now(self) -> PendingCommand | None:
        """Write `clear_queue` now, ahead of an `abort`: pi's abort would go on with the queued
        steers and follow-ups otherwise (pi's docs/rpc-commands.md). pi answers it at once, with
        their texts (read with `unsent_texts`). None, and nothing written, when pi's queue is
        empty as far as its `queue_update`s and the answers so far tell: pi handles the clear
        before the abort, which would cost the cancel that much."""
        if not self.holds_queued and not any(p.name in _QUEUEING for p in self._waiting.values()):
            return None
        return self.send_now({"type": "clear_queue"})

    async def unsent(self, command: LiveCommand, timeout: float | None = None) -> list[str]:
        """The texts a `clear_queue` took out of pi's queue (steers first, then follow-ups)."""
        return unsent_texts(await self.answer(own_command(command), timeout))

    async def switch_session(self, session_file: str) -> LiveState:
        """Load a stored session into this pi (a spare taking a resumed conversation); its state
        afterwards, as `prepare` returns it. Raises RpcError when pi refuses or an extension
        cancelled the switch."""
        data = await self.request({"type": "switch_session", "sessionPath": session_file})
        if data.get("cancelled") is True:
            raise RpcError("switch_session", "was cancelled by an extension", kind="refused")
        return live_state(await self.request({"type": "get_state"}))

    async def stats(self, timeout: float | None = None) -> SessionStats:
        """get_session_stats: the context window's use and the session's cost."""
        return session_stats(await self.request({"type": "get_session_stats"}, timeout))

    async def commands(self) -> list[AgentCommand]:
        """get_commands: pi's extension commands, prompt templates and skills."""
        return agent_commands(await self.request({"type": "get_commands"}))

    async def run_command(self, command: BridgeCommand) -> CommandDone:
        """A bridge command as pi's own rpc command; pi streams compaction_start/_end meanwhile.

        Compaction asks the model for a summary: its wait is the run's (deadline, silence,
        cancel), not the command timeout of a quick answer.
        """
        if command.name == "compact":
            ask: dict[str, Any] = {"type": "compact"}
            if command.argument:
                ask["customInstructions"] = command.argument
            return compacted(await self.request(ask, COMPACT_TIMEOUT_SECONDS))
        if command.name == "autocompact":
            enabled = command.argument == "on"
            await self.request({"type": "set_auto_compaction", "enabled": enabled})
            return CommandDone(f"Auto-compaction is {'on' if enabled else 'off'}.")
        if command.name == "name":
            await self.rename(command.argument)
            return CommandDone(f"Renamed the conversation: {command.argument}")
        if command.name == "export":
            ask = {"type": "export_html"}
            if command.export_path:
                ask["outputPath"] = command.export_path
            path = (await self.request(ask)).get("path")
            return CommandDone(str(path) if path else "")
        data = await self.request({"type": "new_session"})
        if data.get("cancelled") is True:
            raise RpcError("new_session", "was cancelled by an extension", kind="refused")
        return CommandDone(
            "Started a new conversation.", live_state(await self.request({"type": "get_state"}))
        )

    async def clone(self) -> LiveState:
        """pi's `clone`: the active branch, whole, in a new session."""
        data = await self.request({"type": "clone"})
        if data.get("cancelled") is True:
            raise RpcError("clone", "was cancelled by an extension", kind="refused")
        return live_state(await self.request({"type": "get_state"}))

    async def fork_before(self, prompt: str, ordinal: int) -> LiveState:
        """pi's `fork` at the prompt's user message: a new session holding what came before it."""
        listed = (await self.request({"type": "get_fork_messages"})).get("messages")
        messages = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
        entry = fork_entry(messages, prompt.strip(JS_WHITESPACE), ordinal)
        if entry is None:
            raise RpcError("fork", f"found no message {prompt[:80]!r} to go back to", kind="refused")
        data = await self.request({"type": "fork", "entryId": entry})
        if data.get("cancelled") is True:
            raise RpcError("fork", "was cancelled by an extension", kind="refused")
        return live_state(await self.request({"type": "get_state"}))

    async def rename(self, title: str) -> None:
        """set_session_name: pi stores the title in the session (and prints session_info_changed)."""
        await self.request({"type": "set_session_name", "name": title})

    # ------------------------------------------------------------------ reading

    def _dispatch(self, lines: list[bytes]) -> None:
        mark("pi.out")
        self.lines_read += len(lines)
        events: list[bytes] = []
        for line in lines:
            if not line:
                continue
            if (_RESPONSE_MARK in line[:64] or line.startswith(b'{"id"')) and self._answer(line):
                continue
            if line.startswith(_UI_REQUEST_HEAD) and self._answer_dialog(line):
                continue  # the gate's own question: not an event of the run
            if line.startswith(_QUEUE_UPDATE_HEAD):
                self.holds_queued = _names_queued(line)
            events.append(line)
        if events:
            listener = self.listener
            if listener is not None:
                listener(events)
            else:
                self.garbage += sum(1 for line in events if not line.startswith(b"{"))
                self.held.extend(
                    line for line in events if line.startswith(_UI_REQUEST_HEAD) and _NOTIFY in line
                )

    def _answer_dialog(self, line: bytes) -> bool:
        """Answer an extension's dialog; True when the line is handled here, not the run's event.

        The gate's question goes to `asks` (the attempt's permission check), and with no attempt
        listening it is denied: nothing runs unasked. Another dialog goes to `dialogs` (the user,
        through the front), and with none it is answered `cancelled` at once, since an unanswered
        dialog would block the run until it is cancelled; that line goes on to the mapper, which
        tells the user (a `notice`). A `notify` is told to `dialogs` too, and stays an event."""
        try:
            request = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(request, dict):
            return False
        method = request.get("method")
        if method == "notify":
            self._tell(request)
            return False
        if method not in UI_DIALOGS:
            return False
        request_id = request.get("id")
        if not isinstance(request_id, str):
            return False  # nothing to answer it by: pi's own timeout (if any) settles it
        if is_gate_request(request):
            self._check_tool(request_id, tool_check(request))
            return True
        if is_fs_request(request) or is_command_request(request):
            op = file_op(request) if is_fs_request(request) else command_op(request)
            self._do_file_op(request_id, op)
            return True
        dialog, dialogs, tasks = dialog_of(request), self.dialogs, self._tasks
        if dialog is None or dialogs is None or tasks is None or request_id in self._open_checks:
            if request_id not in self._open_checks:
                log.info("pi rpc: an extension's %s dialog answered cancelled (no one to ask)", method)
                self._write_quietly(reply_line(request_id, DIALOG_CANCELLED))
            return False
        self._open_checks.add(request_id)
        tasks.start_soon(self._put_dialog, request_id, dialog, dialogs)
        return True

    def _tell(self, request: dict[str, Any]) -> None:
        dialog, dialogs, tasks = dialog_of(request), self.dialogs, self._tasks
        if dialog is not None and dialogs is not None and tasks is not None:
            tasks.start_soon(self._told, dialog, dialogs)

    async def _told(self, dialog: Dialog, dialogs: AskDialog) -> None:
        try:
            await dialogs(dialog)
        except Exception:
            log.exception("pi rpc: telling the user an extension's notify failed")

    async def _put_dialog(self, request_id: str, dialog: Dialog, dialogs: AskDialog) -> None:
        """Have the user answer one dialog, then answer pi once (pi waits: not its silence)."""
        self._deciding += 1
        reply = DIALOG_CANCELLED
        try:
            reply = await dialogs(dialog)
        except Exception:
            log.exception("pi rpc: asking the user an extension's %s dialog failed", dialog.kind)
        finally:
            self._deciding -= 1
            self.reading_since = time.monotonic()
            if request_id in self._open_checks:
                self._open_checks.discard(request_id)
                self._write_quietly(reply_line(request_id, reply))

    def _check_tool(self, request_id: str, check: ToolCheck | None) -> None:
        """Have the gate's question decided, then answered once (a second answer is dropped)."""
        if request_id in self._open_checks:
            return  # pi asks once per id: a repeat is not a new question
        self._open_checks.add(request_id)
        asks, tasks = self.asks, self._tasks
        if check is None or asks is None or tasks is None:
            reason = "not a tool call the bridge can read" if check is None else "no run is listening"
            self._settle_check(request_id, ToolVerdict(allow=False, reason=f"denied: {reason}"))
            return
        tasks.start_soon(self._decide, request_id, check, asks, partial(answer_line, request_id))

    def _do_file_op(self, request_id: str, op: FileOp | None) -> None:
        """Have a file tool's operation done by the run's policy, then answered once."""
        if request_id in self._open_checks:
            return
        self._open_checks.add(request_id)
        file_ops, tasks = self.file_ops, self._tasks
        if op is None or file_ops is None or tasks is None:
            reason = "not a file operation the bridge can read" if op is None else "no run is listening"
            self._settle(request_id, fs_answer_line(request_id, FileOpResult(error=f"refused: {reason}")))
            return
        tasks.start_soon(self._file_op, request_id, op, file_ops)

    async def _file_op(self, request_id: str, op: FileOp, file_ops: DoFileOp) -> None:
        self._deciding += 1
        try:
            result = await file_ops(op)
        except Exception:
            log.exception("pi rpc: the file operation of tool call %s failed", op.tool_call_id)
            result = FileOpResult(error="refused: the bridge could not do the file operation")
        finally:
            self._deciding -= 1
            self.reading_since = time.monotonic()
        self._settle(request_id, fs_answer_line(request_id, result))

    def _settle_check(self, request_id: str, verdict: ToolVerdict) -> None:
        self._settle(request_id, answer_line(request_id, verdict))

    def _answer(self, line: bytes) -> bool:
        record = json_object(line)
        if record is None or record.get("type") != "response":
            return False
        if not self._deliver(str(record.get("id")), record) and record.get("success") is not True:
            log.info("pi rpc: an unmatched failed response: %s", str(record.get("error"))[:200])
        return True


class PiLiveMode:
    """pi's `LiveMode`: `pi --mode rpc`, one process per conversation, prompt after prompt."""

    def launch_spec(
        self, command: tuple[str, ...], options: RunOptions, *, new_session_id: str | None = None
    ) -> LaunchSpec:
        """pi in rpc mode for a conversation."""
        return rpc_launch_spec(command, options, new_session_id=new_session_id)

    def client(
        self, child: ChildProcess, *, wait_writable: Callable[[], Awaitable[None]] | None = None
    ) -> PiRpc:
        """The rpc client of a pi just spawned."""
        return PiRpc(child, wait_writable=wait_writable)

    #: The events the engine reads itself, and a user message's text (pi's event lines).
    event_kind = staticmethod(event_kind)
    user_text = staticmethod(user_text)
    #: pi's sessions: the newest of a folder by its file names, and a stored one's file.
    latest_session_id = staticmethod(latest_session_id)
    session_file = staticmethod(session_file)
    #: pi appends to its session file: a mark is the file's size, and a cut truncates to it.
    session_mark = staticmethod(session_file_size)
    cut_session_back = staticmethod(trim_session_file)
    #: pi's exit classification, and whether its stderr says it has no `--mode rpc`.
    classify_exit = staticmethod(classify_exit)
    lacks_live_mode = staticmethod(lacks_rpc_mode)

    def session_stored(self, session_id: str, cwd: str, env: Mapping[str, str]) -> bool:
        """Whether pi has written session `session_id`."""
        return session_exists(session_id, False, cwd, env)

    def silence_may_mean_no_live_mode(self) -> bool:
        """A `piCommand` may name a wrapper or an old pi that reads stdin as something else."""
        return True
