#!/usr/bin/env python3
"""A stand-in for `pi --mode rpc` that produces, on demand, the faults real pi cannot be made to.

It behaves the way pi 1.6.0 does in rpc mode (its docs/rpc.md): JSONL commands on stdin, each
answered by a `response` with the command's id; `prompt` is answered at once and the run streams
json-mode events ending with `agent_end` then `agent_settled`; `abort` is answered after the run
settled; `steer` is taken in as a user message before the next step. The scenario is the model
(`--model` at start, or `set_model` later):
- text: a short streamed answer;
- slow: streams a word every 50 ms for a long time (for cancels and steers);
- ignore_abort: streams like slow, never answers `abort` and ignores SIGTERM;
- daemons: its tool leaves a double-forked daemon and a setsid child behind, even after abort;
- daemons_slow_settle: daemons, then 1.5 s between the tool's end and the settle after an abort
  (an agent that winds down slowly once its tool reported the cancel);
- garbage: prints lines that are not JSON between its events;
- mute: never answers any command;
- exit_at_start: exits with an error before reading anything;
- slow_start: waits $FAKE_RPC_PI_START_DELAY s (default 3) before it reads its first command;
- wedged: answers the commands of its start-up, then never reads stdin again;
- die: dies (exit 1) in the middle of its answer;
- err500: the model fails every prompt with a 500 (retryable);
- ask10: asks the bridge's gate about 10 bash calls at once (pi itself asks one at a time), runs
  the ones allowed, and ends when every question is answered or the run is aborted. With
  $FAKE_RPC_PI_ANSWERS set, "<request id> <decision>" of each answer received is appended there.
Without --model the scenario is $FAKE_RPC_PI_SCENARIO (default text). With
$FAKE_RPC_PI_COMMANDS set, "<pid> <type>" of each command received is appended to that file;
$FAKE_RPC_PI_SESSION_FILE is the session file get_state reports (pi's own is in its agent dir). With
$FAKE_RPC_PI_LEAK naming a file, every start is counted there and every start but the first
fails: it prints on stderr the value of each *_API_KEY variable it was given, then exits (a pi
whose error output carries a secret, after one that worked: the bridge knows it speaks rpc).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

SESSION_ID = str(uuid.uuid4())
_out = threading.Lock()
_state: dict[str, object] = {"scenario": "text", "steers": [], "abort": threading.Event(), "running": False}
#: The gate's questions of the ask10 scenario: request id -> the decision answered (None: not yet).
_asked: dict[str, str | None] = {}
_answered = threading.Condition()
GATE_TITLE = "pi-bridge:permission"  # bridge/agents/pi/tool_checks.py's MARKER
QUESTIONS = 10


def emit(event: dict[str, object]) -> None:
    with _out:
        sys.stdout.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def raw(text: str) -> None:
    with _out:
        sys.stdout.write(text)
        sys.stdout.flush()


def respond(command: dict[str, object], data: object = None, *, ok: bool = True, error: str = "") -> None:
    record: dict[str, object] = {"type": "response", "command": command.get("type"), "success": ok}
    if "id" in command:
        record = {"id": command["id"], **record}
    if data is not None:
        record["data"] = data
    if not ok:
        record["error"] = error
    emit(record)


def usage() -> dict[str, object]:
    return {"input": 3, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 8, "cost": {"total": 0}}


def user(text: str) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": text}]}
    emit({"type": "message_start", "message": message})
    emit({"type": "message_end", "message": message})


def delta(text: str) -> None:
    emit({"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": text}})


def assistant_end(text: str, stop: str = "stop", error: str | None = None) -> None:
    content = [{"type": "text", "text": text}] if text else []
    message = {"role": "assistant", "content": content, "usage": usage(), "stopReason": stop}
    if error is not None:
        message["errorMessage"] = error
    emit({"type": "message_end", "message": message})


def settle(aborted: bool) -> None:
    emit({"type": "turn_end", "message": {"role": "assistant"}, "toolResults": []})
    emit({"type": "agent_end", "messages": []})
    emit({"type": "agent_settled", "aborted": aborted})


def take_steers() -> None:
    steers: list[str] = _state["steers"]  # type: ignore[assignment]
    if not steers:
        return
    while steers:
        user(steers.pop(0))
    queue_update()


def queue_update() -> None:
    """The whole queue, printed each time it changes (ahead of the answer to what changed it),
    as pi 1.6.0 does."""
    emit({"type": "queue_update", "steering": list(_state["steers"]), "followUp": []})  # type: ignore[call-overload]


def leave_daemons() -> None:
    code = "import time; time.sleep(300)"
    subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdin=subprocess.DEVNULL)
    # double fork: the grandchild is orphaned at once
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, "-c", code])
        os._exit(0)


def daemons(abort: threading.Event, scenario: str) -> None:
    """The `daemons` scenarios: a tool that leaves daemons, closed as an error once aborted."""
    emit(
        {
            "type": "tool_execution_start",
            "toolCallId": "t1",
            "toolName": "bash",
            "args": {"command": "daemons"},
        }
    )
    leave_daemons()
    emit(
        {
            "type": "tool_execution_update",
            "toolCallId": "t1",
            "toolName": "bash",
            "partialResult": {"content": [{"type": "text", "text": "started"}]},
        }
    )
    abort.wait(60)
    result = {"content": [{"type": "text", "text": "aborted"}]}
    emit(
        {
            "type": "tool_execution_end",
            "toolCallId": "t1",
            "toolName": "bash",
            "result": result,
            "isError": True,
        }
    )
    if scenario == "daemons_slow_settle":
        time.sleep(1.5)


def run(prompt: str, abort: threading.Event) -> None:
    scenario = str(_state["scenario"])
    emit({"type": "agent_start"})
    emit({"type": "turn_start"})
    user(prompt)
    emit({"type": "message_start", "message": {"role": "assistant", "content": []}})
    text: list[str] = []
    aborted = False
    if scenario in ("daemons", "daemons_slow_settle"):
        daemons(abort, scenario)
        aborted = True
    elif scenario == "err500":
        assistant_end("", "error", "500 fake upstream failure")
        settle(False)
        _state["running"] = False
        return
    elif scenario in ("slow", "ignore_abort", "latesteer"):
        for index in range(2000):
            if abort.is_set() and scenario != "ignore_abort":
                aborted = True
                break
            piece = f"word{index} "
            text.append(piece)
            delta(piece)
            abort.wait(0.05)
            take_steers()
    elif scenario == "ask10":
        aborted = ask_the_gate(abort)
    elif scenario == "die":
        delta("about to die ")
        sys.stdout.flush()
        os._exit(1)
    else:
        for piece in ("Hello ", "from ", "the ", "fake ", "rpc ", "pi."):
            if scenario == "garbage":
                raw("this is not json\n")
            text.append(piece)
            delta(piece)
        take_steers()
    assistant_end("".join(text), "aborted" if aborted else "stop")
    settle(aborted)
    _state["running"] = False


def ask_the_gate(abort: threading.Event) -> bool:
    """Ask QUESTIONS gate questions at once; run each allowed call. True when aborted first."""
    run_id = uuid.uuid4().hex[:8]
    ids = [f"{run_id}-{n}" for n in range(QUESTIONS)]
    with _answered:
        _asked.update(dict.fromkeys(ids))
    for number, request_id in enumerate(ids):
        call = {
            "toolCallId": f"call-{request_id}",
            "toolName": "bash",
            "input": {"command": f"echo {number}"},
        }
        emit(
            {
                "type": "extension_ui_request",
                "id": request_id,
                "method": "input",
                "title": GATE_TITLE,
                "placeholder": json.dumps(call),
            }
        )
    with _answered:
        while not abort.is_set() and any(_asked[i] is None for i in ids):
            _answered.wait(0.05)
        decisions = {i: _asked[i] for i in ids}
    for request_id, decision in decisions.items():
        if decision != "allow":
            continue
        call_id = f"call-{request_id}"
        emit({"type": "tool_execution_start", "toolCallId": call_id, "toolName": "bash", "args": {}})
        result = {"content": [{"type": "text", "text": "ran"}]}
        emit({"type": "tool_execution_end", "toolCallId": call_id, "toolName": "bash", "result": result})
    return abort.is_set()


def take_answer(command: dict[str, Any]) -> None:
    """An extension_ui_response: the gate's decision on one question (each id counted)."""
    request_id, value = str(command.get("id")), command.get("value")
    try:
        decision = str(json.loads(value).get("decision")) if isinstance(value, str) else "cancelled"
    except (json.JSONDecodeError, AttributeError):
        decision = "unreadable"
    log = os.environ.get("FAKE_RPC_PI_ANSWERS")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{request_id} {decision}\n")
    with _answered:
        if request_id in _asked and _asked[request_id] is None:
            _asked[request_id] = decision
        _answered.notify_all()


def ignore_sigterm_if_unabortable() -> None:
    """The ignore_abort scenario ignores SIGTERM (only SIGKILL stops it)."""
    if _state["scenario"] == "ignore_abort":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Commands:
    """The agent's answer to each rpc command: one method per command type, `other` for the rest.

    It holds the run in flight (its thread and abort event), which `prompt` starts and `abort` ends.
    """

    def __init__(self) -> None:
        self.worker: threading.Thread | None = None
        self.abort = threading.Event()
        self.handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "set_model": self.set_model,
            "get_state": self.get_state,
            "set_thinking_level": self.set_thinking_level,
            "get_session_stats": self.get_session_stats,
            "prompt": self.prompt,
            "steer": self.steer,
            "abort": self.abort_run,
            "clear_queue": self.clear_queue,
            "extension_ui_response": take_answer,
        }

    def answer(self, command: dict[str, Any]) -> None:
        """Answers one command (none at all in the mute scenario)."""
        kind = command.get("type")
        log = os.environ.get("FAKE_RPC_PI_COMMANDS")
        if log:  # what the bridge sent, one type per line
            with open(log, "a") as handle:
                handle.write(f"{os.getpid()} {kind}\n")
        if _state["scenario"] == "mute":
            return
        handler = self.handlers.get(kind, self.other) if isinstance(kind, str) else self.other
        handler(command)

    def set_model(self, command: dict[str, Any]) -> None:
        """Switches the scenario to the model asked for."""
        _state["scenario"] = command.get("modelId", "text")
        ignore_sigterm_if_unabortable()
        respond(command, {"id": command.get("modelId"), "provider": command.get("provider")})

    def get_state(self, command: dict[str, Any]) -> None:
        """The session's state; in the wedged scenario, the last command it ever reads."""
        state = {
            "sessionId": SESSION_ID,
            "messageCount": 0,
            "isStreaming": bool(_state["running"]),
            "model": {"provider": "fake-rpc", "id": _state["scenario"]},
            "thinkingLevel": _state.get("thinking", "off"),
        }
        if os.environ.get("FAKE_RPC_PI_SESSION_FILE"):
            state["sessionFile"] = os.environ["FAKE_RPC_PI_SESSION_FILE"]
        respond(command, state)
        if _state["scenario"] == "wedged":
            time.sleep(3600)  # alive, never reading stdin again: its pipe fills up

    def set_thinking_level(self, command: dict[str, Any]) -> None:
        """Takes the thinking level (get_state reports it)."""
        _state["thinking"] = command.get("level")
        respond(command)

    def get_session_stats(self, command: dict[str, Any]) -> None:
        """Fixed figures for the session's cost and context."""
        respond(
            command,
            {
                "sessionId": SESSION_ID,
                "cost": 0.25,
                "contextUsage": {"tokens": 8, "contextWindow": 1000, "percent": 0.8},
            },
        )

    def prompt(self, command: dict[str, Any]) -> None:
        """Starts a run in its own thread and answers at once; refused while one is running."""
        if _state["running"]:
            respond(command, ok=False, error="Agent is already processing.")
            return
        _state["running"] = True
        self.abort = threading.Event()
        respond(command, {"disposition": "started"})
        self.worker = threading.Thread(
            target=run, args=(str(command.get("message", "")), self.abort), daemon=True
        )
        self.worker.start()

    def steer(self, command: dict[str, Any]) -> None:
        """Queues the message, taken in before the run's next step. In latesteer it is queued
        (and answered) 0.5 s after it was read, as pi queues a steer only after its extensions'
        input handlers: a command read after it (clear_queue) can come first."""

        def queue() -> None:
            _state["steers"].append(str(command.get("message", "")))  # type: ignore[attr-defined]
            queue_update()
            respond(command, {"disposition": "queued"})

        if _state["scenario"] == "latesteer":
            threading.Timer(0.5, queue).start()
            return
        queue()

    def clear_queue(self, command: dict[str, Any]) -> None:
        """Takes the queued steers out and answers with their texts, as pi does."""
        steers: list[str] = _state["steers"]  # type: ignore[assignment]
        taken, steers[:] = list(steers), []
        if taken:
            queue_update()
        respond(command, {"steering": taken, "followUp": []})

    def abort_run(self, command: dict[str, Any]) -> None:
        """Aborts the run and answers once it settled; never answered in ignore_abort."""
        if _state["scenario"] == "ignore_abort":
            return
        self.abort.set()
        if self.worker is not None:
            self.worker.join(10)
        respond(command)

    def other(self, command: dict[str, Any]) -> None:
        """Any other command: a bare success."""
        respond(command)


def take_session_id(argv: list[str]) -> None:
    """Like pi: `--session` resumes, `--session-id` starts under that id (the last one given wins)."""
    global SESSION_ID
    for flag in ("--session", "--session-id"):
        if flag in argv:
            SESSION_ID = argv[argv.index(flag) + 1]


def leak_if_restarted() -> bool:
    """With $FAKE_RPC_PI_LEAK: counts this start, and on any start but the first prints the
    *_API_KEY variables on stderr (true: the caller then exits)."""
    leak = os.environ.get("FAKE_RPC_PI_LEAK")
    if not leak:
        return False
    with open(leak, "a+") as starts:
        starts.seek(0)
        earlier = len(starts.read().splitlines())
        starts.write("start\n")
    if not earlier:
        return False
    keys = " ".join(f"{name}={value}" for name, value in os.environ.items() if name.endswith("_API_KEY"))
    sys.stderr.write(f"fake rpc pi: cannot start with {keys}\n")
    return True


def start_up(argv: list[str]) -> int | None:
    """Takes the scenario and session from argv and the environment and plays the start-up faults;
    an exit code when the agent ends before reading any command."""
    # The scenario of an agent started without --model (a bridge's spare), for start-up faults.
    _state["scenario"] = os.environ.get("FAKE_RPC_PI_SCENARIO", "text")
    if "--model" in argv:
        _state["scenario"] = argv[argv.index("--model") + 1]
    take_session_id(argv)
    if leak_if_restarted():
        return 3
    if _state["scenario"] == "exit_at_start":
        sys.stderr.write("fake rpc pi: exiting at start on purpose\n")
        return 3
    ignore_sigterm_if_unabortable()
    if _state["scenario"] == "slow_start":
        time.sleep(float(os.environ.get("FAKE_RPC_PI_START_DELAY", "3")))
        _state["scenario"] = "text"
    return None


def refuse_unparsable(exc: json.JSONDecodeError) -> None:
    """pi's answer to a line that is not JSON."""
    emit(
        {
            "type": "response",
            "command": "parse",
            "success": False,
            "error": f"Failed to parse command: {exc}",
        }
    )


def main() -> int:
    """Starts up, then answers each command line of stdin until its end."""
    code = start_up(sys.argv[1:])
    if code is not None:
        return code
    commands = Commands()
    for line in sys.stdin:
        try:
            command = json.loads(line)
        except json.JSONDecodeError as exc:
            refuse_unparsable(exc)
            continue
        commands.answer(command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
