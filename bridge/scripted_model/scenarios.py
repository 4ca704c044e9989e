"""What each scripted model id answers: the scenarios, their texts, and the reply table."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from bridge.scripted_model.reply import ErrorKind, ErrorReply, Piece, PieceKind, Reply, wire_json
from bridge.scripted_model.request_body import (
    last_user_text_of,
    offered_tool,
    offered_tools,
    tool_results_count,
    tool_results_since_user,
    trailing_tool_result,
)

#: Seconds between pieces of ``slow`` (not scaled: cancel tests need a live stream).
SLOW_INTERVAL: Final = 0.3
#: Number of pieces the ``slow`` scenario streams (~30 s at :data:`SLOW_INTERVAL`).
SLOW_PIECES: Final = 100
#: Seconds ``hang`` stays silent before closing the connection (not scaled).
HANG_SECONDS: Final = 60.0
#: Number of 5-character deltas of the plain ``long`` scenario.
LONG_DEFAULT: Final = 2000
#: Upper bound for ``long-N`` so a typo cannot make the server stream for hours.
LONG_MAX: Final = 1_000_000
#: ``flood``: FLOOD_PIECES numbered deltas of FLOOD_CHARS characters (16 MB: more than every pipe
#: and high-water mark holds); ``flood-N``: N numbered deltas of FLOOD_PIECE_CHARS.
FLOOD_PIECES: Final = 16_000
FLOOD_CHARS: Final = 1000
FLOOD_PIECE_CHARS: Final = 4096
#: Upper bound for ``flood-N`` (N deltas of FLOOD_PIECE_CHARS): 1 GB of text.
FLOOD_MAX: Final = 262_144
#: How many ``flaky`` requests fail before it answers.
FLAKY_FAILURES: Final = 2

TEXT_REPLY: Final = (
    "Hello from the fake model. This reply is streamed in many small pieces so that a "
    "client can observe message_update events one delta at a time. It ends here."
)
THINKING_THOUGHT: Final = (
    "The user greets me. I should answer briefly and politely. A short friendly reply is enough."
)
THINKING_ANSWER: Final = "Hello! Thinking done, here is the answer."
ANTHROPIC_THOUGHT: Final = "Anthropic-style thinking: the user wants a greeting."
ANTHROPIC_TEXT: Final = "Hello from the fake Anthropic endpoint."
ANTHROPIC_SIGNATURE: Final = "fakesig-0123456789abcdef"
TOOL_PREAMBLE: Final = "Let me run that command."
FILE_TOOL_PREAMBLE: Final = "Let me change that file."
LENGTH_TEXT: Final = "This answer will be cut off because"
DROP_TEXT: Final = "Partial answer then the connection"
#: Streamed piece by piece; each piece stresses another way of splitting or escaping.
UNICODE_PIECES: Final[tuple[str, ...]] = (
    "Line1\u2028Line2 ",
    "para\u2029graph ",
    "nel\u0085x ",
    "tab\tand\r\nnewline ",
    "emoji \U0001f600\U0001f44d\U0001f3fd ",
    "CJK \u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f ",
    "combining e\u0301 n\u0303 a\u030a ",
    'quote " backslash \\ ',
    "done",
)
UNICODE_REPLY: Final = "".join(UNICODE_PIECES)

#: The bash command each tool scenario asks pi to run.
TOOL_COMMANDS: Final[dict[str, str]] = {
    "tool": "echo hi",
    "toolfail": "echo out; echo oops >&2; exit 3",
    "toolbig": "seq 1 100000",
    "toolslow": "sleep 30",
    "toolsteer": "sleep 2",
    # Starts with the words of `tool`'s command: a rule allowing those must not allow this.
    "toolcompound": "echo hi && touch compound.txt",
    # A grandchild with no environment, its own session and a double fork: only containment finds it.
    "toolescape": "(env -i setsid sh -c 'echo $$ > escaped.pid.tmp && mv escaped.pid.tmp escaped.pid"
    " && exec sleep 300' &)",
}

#: The file the ``edit`` scenario edits (relative to pi's cwd; the test creates it with
#: :data:`EDIT_ORIGINAL`) and the one replacement it asks for.
EDIT_FILE: Final = "notes.txt"
EDIT_ORIGINAL: Final = "line one\nline two\nline three\n"
EDIT_OLD: Final = "line two"
EDIT_NEW: Final = "line 2, edited"
#: The file the ``write`` scenario creates (relative to pi's cwd) and its content.
WRITE_FILE: Final = "created/new.txt"
WRITE_CONTENT: Final = "first line\nsecond line\n"

#: The call of pi's own file tools each file scenario makes: (tool name, arguments), in the
#: argument shapes of pi 1.6.0's `edit` ({path, edits: [{oldText, newText}]}) and `write`.
FILE_TOOL_CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "edit": ("edit", {"path": EDIT_FILE, "edits": [{"oldText": EDIT_OLD, "newText": EDIT_NEW}]}),
    "write": ("write", {"path": WRITE_FILE, "content": WRITE_CONTENT}),
}
#: Scenarios that call pi's file tool on the path the prompt names (whatever it is: a FIFO, a
#: device, a NUL byte), then answer slowly, like ``slow``, so the run stays live to be cancelled.
PATH_TOOL_CALLS: Final[dict[str, str]] = {"writepath": "write", "editpath": "edit", "readpath": "read"}

SCENARIOS: Final[dict[str, str]] = {
    "text": "streams a fixed English reply word by word",
    "thinking": "streams reasoning_content (thinking) first, then a short text answer",
    "thinking_anthropic": "thinking block + signature, then text (for anthropic-messages)",
    "tool": "calls bash `echo hi`, then answers with what the command printed",
    "toolfail": "calls bash with a command that writes stderr and exits 3, then answers",
    "toolbig": "calls bash `seq 1 100000` so pi truncates the output, then answers",
    "toolslow": "calls bash `sleep 30` (for cancelling mid-tool), then answers `done`",
    "toolsteer": "calls bash `sleep 2` (a window for a steer to land mid-tool), then answers",
    "toolcompound": "calls bash `echo hi && touch compound.txt` (compound: no allow rule matches it)",
    "edit": f"calls pi's edit on {EDIT_FILE} ({EDIT_OLD!r} -> {EDIT_NEW!r}), then answers what it said",
    "write": f"calls pi's write to create {WRITE_FILE} (2 lines), then answers what it said",
    "writepath": "calls pi's write on the path the prompt names (2 lines), then streams like `slow`",
    "readpath": "calls pi's read on the path the prompt names, then streams like `slow`",
    "editpath": f"calls pi's edit on the path the prompt names ({EDIT_OLD!r} -> {EDIT_NEW!r}), then `slow`",
    "toolescape": "calls bash with a detached, env-less `sleep 300` writing escaped.pid in the cwd",
    "shell": "calls bash with the prompt's text as the command, then answers what it printed",
    "script": 'the prompt is JSON, a list of `[tool, arguments]` calls (e.g. `[["read", {"path": "x"}]]`):'
    " makes them one by one under the names and argument shapes offered, then answers with every"
    " tool result it got",
    "askuser": "calls AskUserQuestion (one question, options red/blue), then answers what it said",
    "calltool": "calls the offered tool the prompt's first word names (an MCP tool), with"
    ' `{"text": the rest of the prompt}` (or the rest itself when it is a JSON object), then'
    " answers what it said",
    "todo": "calls the `todo` tool (the bridge's plan tool for pi): adds two todos, checks the first"
    " off, starts the second, then answers with every result; says so when no `todo` tool is offered",
    "unicode": 'raw U+2028/U+2029/U+0085, CR LF, emoji, CJK, combining marks, " and \\',
    "length": "streams some text, then finish_reason `length`",
    "err500": "HTTP 500 with a JSON error body, every time",
    "err429": "HTTP 429 with Retry-After: 0, every time",
    "err401": "HTTP 401 authentication error, every time",
    "flaky": "HTTP 500 for the first 2 requests (per server; reset() re-arms), then text",
    "drop": "streams a few text pieces, then closes without finish_reason or [DONE]",
    "slow": "text at ~300 ms per piece for ~30 s (for cancelling mid-stream)",
    "slow-10": "like `slow`, 10 pieces (~3 s): a live stream that ends soon, for load; `slow-N`: N pieces",
    "long": f"{LONG_DEFAULT} deltas of 5 characters each, no delay; `long-N`: N deltas",
    "long-20000": "20000 deltas of 5 characters each, no delay",
    "long-100000": "100000 deltas of 5 characters each, no delay",
    "flood": f"{FLOOD_PIECES} numbered deltas of {FLOOD_CHARS} characters (16 MB), no delay",
    "flood-8192": "8192 numbered deltas of 4 KB (32 MB), no delay, for a client that stops reading;"
    " `flood-N`: N such deltas",
    "echo": "replies `ECHO:` followed by the exact text of the last user message",
    "hang": "accepts the request, sends nothing for 60 s, then closes the connection",
}


def file_tool_calls(model: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The file tool calls of the `edit`/`write` scenario, in the schema the request offers.

    pi's tools take `path` (FILE_TOOL_CALLS). Tools taking `file_path`/`old_string`/`new_string`
    (Claude Code's Edit and Write) get those shapes; such an Edit refuses a file it has not read
    in the conversation, so the scenario reads it first.
    """
    tools = offered_tools(body)
    edit, write = tools.get("edit"), tools.get("write")
    if model == "edit" and edit is not None and "file_path" in edit[1]:
        read = tools.get("read", ("Read", frozenset()))[0]
        path = _cwd_path(body, EDIT_FILE)
        edit_args = {"file_path": path, "old_string": EDIT_OLD, "new_string": EDIT_NEW}
        return [(read, {"file_path": path}), (edit[0], edit_args)]
    if model == "write" and write is not None and "file_path" in write[1]:
        return [(write[0], {"file_path": _cwd_path(body, WRITE_FILE), "content": WRITE_CONTENT})]
    other = _other_file_call(model, tools)
    return [other] if other is not None else [FILE_TOOL_CALLS[model]]


def _other_file_call(
    model: str, tools: dict[str, tuple[str, frozenset[str]]]
) -> tuple[str, dict[str, Any]] | None:
    """The `edit`/`write` call for OpenCode's `edit`/`write` (`filePath`, `oldString`,
    `newString`) or Gemini CLI's `replace`/`write_file` (`file_path`, `old_string`,
    `new_string`), paths relative to the cwd as they take them; None for another agent."""
    names = ("edit", "replace") if model == "edit" else ("write", "write_file")
    for name in names:
        offered = tools.get(name)
        if offered is None:
            continue
        props = offered[1]
        path_key = next((key for key in ("filePath", "file_path") if key in props), None)
        if path_key is None:
            continue
        if model == "write":
            return offered[0], {path_key: WRITE_FILE, "content": WRITE_CONTENT}
        camel = path_key == "filePath"
        old_key, new_key = ("oldString", "newString") if camel else ("old_string", "new_string")
        return offered[0], {path_key: EDIT_FILE, old_key: EDIT_OLD, new_key: EDIT_NEW}
    return None


_CWD_LINE: Final = re.compile(r"working directory: (/[^\n]*)", re.IGNORECASE)


def _cwd_path(body: dict[str, Any], relative: str) -> str:
    """`relative` under the working directory the request's system prompt names (else relative)."""
    system = body.get("system")
    text = wire_json(system) if not isinstance(system, str) else system
    match = _CWD_LINE.search(text.replace("\\n", "\n"))
    return f"{match.group(1).strip()}/{relative}" if match else relative


#: Shell tools under other names than ``bash``, and the argument that takes the command: Codex's
#: ``exec_command`` (``cmd``), Gemini CLI's ``run_shell_command``, an argv-taking ``shell``.
_SHELL_TOOLS: Final = (("exec_command", "cmd"), ("run_shell_command", "command"), ("shell", "command"))


def shell_call(body: dict[str, Any], command: str) -> tuple[str, dict[str, Any]]:
    """The call that runs ``command`` with the shell tool the request offers: ``bash`` (pi,
    Claude Code, OpenCode) or another agent's own (:data:`_SHELL_TOOLS`); ``bash`` if none."""
    tools = offered_tools(body)
    if "bash" in tools:
        return tools["bash"][0], {"command": command}
    for name, argument in _SHELL_TOOLS:
        if name in tools:
            value: object = ["bash", "-lc", command] if name == "shell" else command
            return tools[name][0], {argument: value}
    return "bash", {"command": command}


def _words(text: str) -> list[str]:
    """Split ``text`` after each space, keeping the spaces (as in the captures)."""
    parts = text.split(" ")
    pieces = [p + " " for p in parts[:-1]] + [parts[-1]]
    return [p for p in pieces if p]


#: The most pieces one text is streamed in: a long answer (one that tells a long tool output back)
#: groups its words, so that it streams in a bounded time, as a real model's larger tokens would.
MAX_TEXT_PIECES: Final = 64


def _text_pieces(text: str, kind: PieceKind = "text") -> list[Piece]:
    words = _words(text)
    if len(words) <= MAX_TEXT_PIECES:
        return [Piece(kind, w) for w in words]
    per_piece = -(-len(words) // MAX_TEXT_PIECES)
    return [Piece(kind, "".join(words[i : i + per_piece])) for i in range(0, len(words), per_piece)]


def _fixed_chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def long_reply_text(count: int) -> str:
    """The text ``long``/``long-N`` streams, as ``count`` 5-character deltas."""
    return "".join(_long_piece(i) for i in range(count))


def _long_piece(i: int) -> str:
    return f"w{i % 1000:03d} "


def flood_piece(i: int, size: int = FLOOD_CHARS) -> str:
    """Delta `i` of ``flood`` (``flood-N``: of FLOOD_PIECE_CHARS): numbered, so a loss or a
    reordering shows."""
    return f"{i:07d}" + "." * (size - 8) + " "


def flood_reply_text(count: int) -> str:
    """The text ``flood-N`` streams, as ``count`` deltas of FLOOD_PIECE_CHARS characters."""
    return "".join(flood_piece(i, FLOOD_PIECE_CHARS) for i in range(count))


def tool_answer_text(model: str, tool_output: str) -> str:
    """The answer a tool scenario gives once the request carries the tool's result."""
    if model == "toolslow":
        return "done"
    output = tool_output.strip()
    if len(output) > 200:
        # Keep the answer short: toolbig is about pi's truncation, not echoing it all.
        output = "\n".join(output.splitlines()[:3]) + "\n ... " + output[-40:]
    return f"The command printed: {output}. Done."


def _tool_call_pieces(name: str, arguments: dict[str, Any]) -> list[Piece]:
    encoded = json.dumps(arguments)
    # 6-character fragments, like the captures: pi must reassemble partial JSON.
    return [Piece("tool_start", name)] + [Piece("tool_args", frag) for frag in _fixed_chunks(encoded, 6)]


def _long_count(model: str) -> int | None:
    if model == "long":
        return LONG_DEFAULT
    match = re.fullmatch(r"long-(\d{1,7})", model)
    if match is None:
        return None
    count = int(match.group(1))
    return count if 0 < count <= LONG_MAX else None


def _slow_reply(count: int = SLOW_PIECES) -> Reply:
    words = _words(TEXT_REPLY)
    words[-1] += " "
    pieces = [Piece("text", words[i % len(words)]) for i in range(count)]
    return Reply(pieces, delay=SLOW_INTERVAL, scaled=False)


def _slow_count(model: str) -> int | None:
    match = re.fullmatch(r"slow-(\d{1,3})", model)
    count = int(match.group(1)) if match else 0
    return count if 0 < count <= SLOW_PIECES else None


def _flood_count(model: str) -> int | None:
    match = re.fullmatch(r"flood-(\d{1,6})", model)
    if match is None:
        return None
    count = int(match.group(1))
    return count if 0 < count <= FLOOD_MAX else None


def _error(status: int, message: str, kind: ErrorKind, *headers: tuple[str, str]) -> Reply:
    return Reply(error=ErrorReply(status, message, kind, tuple(headers)))


@dataclass(frozen=True)
class Ask:
    """What a scenario's reply may depend on: the model id, the request, and (for ``flaky``) this
    request's 1-based number among the server's ``flaky`` requests."""

    model: str
    body: dict[str, Any]
    flaky_attempt: int


Script = Callable[[Ask], Reply]


def _fixed(reply: Callable[[], Reply]) -> Script:
    return lambda _ask: reply()


def _tool_reply(ask: Ask) -> Reply:
    """Call bash with the scenario's command, then answer with what it printed."""
    result = trailing_tool_result(ask.body)
    if result is not None:
        return Reply(_text_pieces(tool_answer_text(ask.model, result)))
    call = _tool_call_pieces(*shell_call(ask.body, TOOL_COMMANDS[ask.model]))
    return Reply(_text_pieces(TOOL_PREAMBLE) + call, "tool_calls")


def _shell_reply(ask: Ask) -> Reply:
    """Call bash with the last user message as the command, then answer with what it printed."""
    result = trailing_tool_result(ask.body)
    if result is not None:
        return Reply(_text_pieces(tool_answer_text(ask.model, result)))
    command = last_user_text_of(ask.body) or "true"
    call = _tool_call_pieces(*shell_call(ask.body, command))
    return Reply(_text_pieces(TOOL_PREAMBLE) + call, "tool_calls")


def _file_tool_reply(ask: Ask) -> Reply:
    """Make the scenario's file tool calls one by one, then answer with what the last one said."""
    calls = file_tool_calls(ask.model, ask.body)
    done = tool_results_count(ask.body)
    if done < len(calls):
        name, arguments = calls[done]
        preamble = _text_pieces(FILE_TOOL_PREAMBLE) if done == 0 else []
        return Reply(preamble + _tool_call_pieces(name, arguments), "tool_calls")
    result = trailing_tool_result(ask.body)
    return Reply(_text_pieces(f"The tool said: {(result or '').strip()} Done."))


def _path_tool_reply(ask: Ask) -> Reply:
    """Call a file tool on the path the prompt names, then stream like ``slow``."""
    if tool_results_count(ask.body) != 0:
        return _slow_reply()
    name = PATH_TOOL_CALLS[ask.model]
    arguments = FILE_TOOL_CALLS[name][1] if name in FILE_TOOL_CALLS else {}
    call = {**arguments, "path": last_user_text_of(ask.body) or ""}
    pieces = _text_pieces(FILE_TOOL_PREAMBLE) + _tool_call_pieces(offered_tool(ask.body, name), call)
    return Reply(pieces, "tool_calls")


#: What ``script`` answers when its prompt is not a JSON list of ``[tool, arguments]`` pairs.
SCRIPT_UNREADABLE: Final = "The script is not a JSON list of [tool, arguments] calls."
SCRIPT_PREAMBLE: Final = "Following the script."
#: Argument renames from pi's shapes to those of a tool taking ``file_path`` (Claude Code's).
_CLAUDE_ARGUMENTS: Final = {"path": "file_path"}


def script_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls a ``script`` prompt lists, or None when it is not a JSON list of
    ``[tool, arguments]`` pairs."""
    try:
        listed = json.loads(text)
    except ValueError:
        return None
    if not isinstance(listed, list):
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    for item in listed:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            return None
        if not isinstance(item[1], dict):
            return None
        calls.append((item[0], item[1]))
    return calls


def offered_call(body: dict[str, Any], name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A scripted call as the request offers its tool: the tool's spelling, and pi's argument
    shapes mapped to a ``file_path`` tool's (``path`` -> ``file_path``, one ``edits`` entry ->
    ``old_string``/``new_string``) or back, as the offered schema names them."""
    tools = offered_tools(body)
    if name.lower() == "bash" and "bash" not in tools and isinstance(arguments.get("command"), str):
        return shell_call(body, arguments["command"])
    offered, props = tools.get(name.lower(), (name, frozenset()))
    mapped = dict(arguments)
    if "file_path" in props and "path" in mapped and "path" not in props:
        path = str(mapped.pop("path"))
        # Claude Code's file tools take absolute paths: a relative one is the cwd's.
        relative = not path.startswith(("/", "~", "file:"))
        mapped["file_path"] = _cwd_path(body, path) if relative else path
    if "path" in props and "file_path" in mapped and "file_path" not in props:
        mapped["path"] = mapped.pop("file_path")
    edits = mapped.get("edits")
    if "old_string" in props and isinstance(edits, list) and len(edits) == 1 and isinstance(edits[0], dict):
        del mapped["edits"]
        mapped["old_string"] = edits[0].get("oldText", "")
        mapped["new_string"] = edits[0].get("newText", "")
    if "edits" in props and "old_string" in mapped and "edits" not in mapped:
        old, new = mapped.pop("old_string"), mapped.pop("new_string", "")
        mapped["edits"] = [{"oldText": old, "newText": new}]
    return offered, mapped


def _script_reply(ask: Ask) -> Reply:
    """Make the calls the prompt lists one by one (counting the tool results the request holds),
    then answer with every tool result it got."""
    calls = script_calls(last_user_text_of(ask.body) or "")
    if calls is None:
        return Reply(_text_pieces(SCRIPT_UNREADABLE))
    done = tool_results_count(ask.body)
    if done < len(calls):
        name, arguments = offered_call(ask.body, *calls[done])
        preamble = _text_pieces(SCRIPT_PREAMBLE) if done == 0 else []
        return Reply(preamble + _tool_call_pieces(name, arguments), "tool_calls")
    results = tool_results_since_user(ask.body)
    told = "\n".join(f"[{i + 1}] {result.strip()}" for i, result in enumerate(results))
    return Reply(_text_pieces(f"The tools said:\n{told}\nDone."))


ASK_USER_QUESTION: Final = "Which colour?"


def _ask_user_reply(ask: Ask) -> Reply:
    """Ask the user one question with Claude Code's AskUserQuestion, then answer with its result."""
    result = trailing_tool_result(ask.body)
    if result is not None:
        return Reply(_text_pieces(f"The tool said: {result.strip()} Done."))
    options = [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]
    question = {"question": ASK_USER_QUESTION, "header": "Colour", "options": options, "multiSelect": False}
    call = _tool_call_pieces("AskUserQuestion", {"questions": [question]})
    return Reply(_text_pieces(TOOL_PREAMBLE) + call, "tool_calls")


#: What ``calltool`` answers when the request offers no tool of the name its prompt gives.
NO_SUCH_TOOL: Final = "No tool named {name} is offered."


def _call_tool_reply(ask: Ask) -> Reply:
    """Call the tool the prompt's first word names, exactly as offered, with the rest of the
    prompt as its `text`; then answer with its result (or say that no such tool is offered)."""
    result = trailing_tool_result(ask.body)
    if result is not None:
        return Reply(_text_pieces(f"The tool said: {result.strip()} Done."))
    name, _, text = (last_user_text_of(ask.body) or "").strip().partition(" ")
    if name not in {offered[0] for offered in offered_tools(ask.body).values()}:
        return Reply(_text_pieces(NO_SUCH_TOOL.format(name=name or "(none)")))
    return Reply(_text_pieces(TOOL_PREAMBLE) + _tool_call_pieces(name, _call_arguments(text)), "tool_calls")


def _call_arguments(text: str) -> dict[str, Any]:
    """`calltool`'s arguments: the prompt's rest when it is a JSON object (a built-in tool's own
    shape, such as WebFetch's `{"url", "prompt"}`), else `{"text": the rest}`."""
    if text.startswith("{"):
        try:
            arguments = json.loads(text)
        except ValueError:
            return {"text": text}
        if isinstance(arguments, dict):
            return arguments
    return {"text": text}


#: The ``todo`` scenario's calls: the plan it leaves is TODO_PLAN (content, status).
TODO_CALLS: Final[list[dict[str, Any]]] = [
    {"action": "add", "text": "Read the parser"},
    {"action": "add", "text": "Fix division by zero"},
    {"action": "toggle", "id": 1},
    {"action": "start", "id": 2},
]
TODO_PLAN: Final = (("Read the parser", "completed"), ("Fix division by zero", "in_progress"))


def _todo_reply(ask: Ask) -> Reply:
    """Make TODO_CALLS with the offered `todo` tool one by one, then answer with its results."""
    if "todo" not in {offered[0] for offered in offered_tools(ask.body).values()}:
        return Reply(_text_pieces(NO_SUCH_TOOL.format(name="todo")))
    done = tool_results_count(ask.body)
    if done < len(TODO_CALLS):
        preamble = _text_pieces(TOOL_PREAMBLE) if done == 0 else []
        return Reply(preamble + _tool_call_pieces("todo", TODO_CALLS[done]), "tool_calls")
    told = "\n".join(result.strip() for result in tool_results_since_user(ask.body))
    return Reply(_text_pieces(f"The tools said:\n{told}\nDone."))


def _flaky_reply(ask: Ask) -> Reply:
    if ask.flaky_attempt <= FLAKY_FAILURES:
        return _error(500, f"fake flaky failure {ask.flaky_attempt}/{FLAKY_FAILURES}", "server")
    return Reply(_text_pieces(TEXT_REPLY))


def _echo_reply(ask: Ask) -> Reply:
    text = "ECHO:" + (last_user_text_of(ask.body) or "")
    return Reply([Piece("text", c) for c in _fixed_chunks(text, 16)])


#: The scenarios named by a fixed model id, and how each answers.
SCRIPTS: Final[dict[str, Script]] = {
    "text": _fixed(lambda: Reply(_text_pieces(TEXT_REPLY))),
    "thinking": _fixed(
        lambda: Reply(_text_pieces(THINKING_THOUGHT, "thinking") + _text_pieces(THINKING_ANSWER))
    ),
    "thinking_anthropic": _fixed(
        lambda: Reply(_text_pieces(ANTHROPIC_THOUGHT, "thinking") + _text_pieces(ANTHROPIC_TEXT))
    ),
    **{model: _tool_reply for model in TOOL_COMMANDS},
    **{model: _file_tool_reply for model in FILE_TOOL_CALLS},
    **{model: _path_tool_reply for model in PATH_TOOL_CALLS},
    "unicode": _fixed(lambda: Reply([Piece("text", p) for p in UNICODE_PIECES])),
    "length": _fixed(lambda: Reply(_text_pieces(LENGTH_TEXT), "length")),
    "err500": _fixed(lambda: _error(500, "fake internal server error", "server")),
    "err429": _fixed(lambda: _error(429, "fake rate limit exceeded", "rate_limit", ("Retry-After", "0"))),
    "err401": _fixed(lambda: _error(401, "fake invalid API key", "auth")),
    "flaky": _flaky_reply,
    "askuser": _ask_user_reply,
    "shell": _shell_reply,
    "script": _script_reply,
    "calltool": _call_tool_reply,
    "todo": _todo_reply,
    "drop": _fixed(lambda: Reply(_text_pieces(DROP_TEXT), None)),
    "slow": _fixed(_slow_reply),
    "echo": _echo_reply,
    "hang": _fixed(lambda: Reply(hang=HANG_SECONDS)),
    "flood": _fixed(lambda: Reply([Piece("text", flood_piece(i)) for i in range(FLOOD_PIECES)], delay=0.0)),
}


def _counted_reply(model: str) -> Reply | None:
    """``long-N`` and ``flood-N`` (and plain ``long``): N deltas, no delay; ``slow-N``: N slow pieces."""
    count = _slow_count(model)
    if count is not None:
        return _slow_reply(count)
    count = _long_count(model)
    if count is not None:
        return Reply([Piece("text", _long_piece(i)) for i in range(count)], delay=0.0)
    count = _flood_count(model)
    if count is not None:
        return Reply([Piece("text", flood_piece(i, FLOOD_PIECE_CHARS)) for i in range(count)], delay=0.0)
    return None


def build_reply(model: str, body: dict[str, Any], flaky_attempt: int) -> Reply:
    """The scripted answer of scenario ``model`` to a request with ``body``.

    ``flaky_attempt`` is the 1-based number of this request among the server's ``flaky``
    requests (ignored for other models).
    """
    script = SCRIPTS.get(model)
    if script is not None:
        return script(Ask(model, body, flaky_attempt))
    counted = _counted_reply(model)
    if counted is not None:
        return counted
    return _error(404, f"model {model} not found", "not_found")
