#!/usr/bin/env python3
"""A small stand-in for pi that produces, on demand, the faults real pi cannot be made to produce.

It speaks pi 1.6.0's `--mode json` format. The scenario is the `--model` flag (the bridge passes
the run's `model` through), so a test picks a fault with `{"model": "crash_tool"}`. Like real pi
it reads the prompt from stdin to EOF first. State that must survive across attempts (retry
tests) lives in the file named by FAKE_PI_STATE, or by the prompt when it is an absolute path.

The fuzz, secrets and load suites use a few more scenarios:
- `env`: answers with which of the variables named in the prompt (one per line) are set, with
  each value's length and SHA-256, never the value itself;
- `digest`: answers with the length and SHA-256 of the prompt bytes it read on stdin;
- `flood-N` / `flood-N-S`: streams N numbered deltas (`d0000001;`, padded to S chars) as fast as
  it can write, then ends;
- `sleep`: starts an answer, then sleeps (a run to cancel);
- `stderr-env`: prints nothing on stdout and exits 1, naming on stderr (as pi would) the variables
  of the prompt that are set, never their values.
Asked for `--mode rpc` it refuses at once, as a pi without that mode does; with FAKE_PI_RPC=hang
it reads stdin to its end and says nothing, as an agent that takes the flag for something else.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

SESSION_ID = "01fa4e00-0000-7000-8000-000000000001"
#: The answer of the `text` scenario (tests import it rather than copy it).
TEXT = "Hello from the fake pi. It streams a few deltas."


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def raw(line: bytes) -> None:
    sys.stdout.buffer.write(line)
    sys.stdout.flush()


def usage() -> dict[str, object]:
    return {"input": 3, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 8, "cost": {"total": 0}}


def start(cwd: str) -> None:
    emit({"type": "session", "version": 3, "id": SESSION_ID, "timestamp": "2026-11-29T00:00:00Z", "cwd": cwd})
    emit({"type": "agent_start"})
    emit({"type": "turn_start"})


def assistant_start() -> None:
    emit({"type": "message_start", "message": {"role": "assistant", "content": [], "stopReason": "pending"}})


def delta(text: str) -> None:
    emit(
        {
            "type": "message_update",
            "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": text},
        }
    )


def assistant_end(
    text: str, stop: str = "stop", error: str | None = None, tool: dict[str, object] | None = None
) -> None:
    content: list[dict[str, object]] = [{"type": "text", "text": text}] if text else []
    if tool:
        content.append({"type": "toolCall", **tool})
    message: dict[str, object] = {
        "role": "assistant",
        "content": content,
        "usage": usage(),
        "stopReason": stop,
    }
    if error:
        message["errorMessage"] = error
    emit({"type": "message_end", "message": message})


def finish(text: str, stop: str = "stop") -> None:
    emit({"type": "turn_end", "message": {"role": "assistant"}, "toolResults": []})
    emit({"type": "agent_end", "messages": []})
    emit({"type": "agent_settled", "aborted": False})


def say(text: str, pieces: int = 4) -> None:
    assistant_start()
    words = text.split(" ")
    step = max(1, len(words) // pieces)
    chunks = [" ".join(words[i : i + step]) for i in range(0, len(words), step)]
    for index, chunk in enumerate(chunks):
        delta(chunk + (" " if index < len(chunks) - 1 else ""))
    assistant_end(text)


def tool_start(call_id: str, command: str) -> None:
    args = {"command": command}
    emit({"type": "tool_execution_start", "toolCallId": call_id, "toolName": "bash", "args": args})
    emit(
        {
            "type": "tool_execution_update",
            "toolCallId": call_id,
            "toolName": "bash",
            "args": args,
            "partialResult": {"content": []},
        }
    )


def ignore_polite_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP: only SIGKILL stops this process."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)


def stubborn_child(new_session: bool) -> None:
    """A child that ignores SIGINT/SIGTERM/SIGHUP, optionally in its own session."""
    code = (
        "import signal,time\n"
        "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
        "time.sleep(300)\n"
    )
    subprocess.Popen([sys.executable, "-c", code], start_new_session=new_session, stdin=subprocess.DEVNULL)


def double_fork_daemon() -> None:
    """The classic daemon: fork, setsid, fork again, parent exits; ignores polite signals."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ignore_polite_signals()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            time.sleep(300)
        os._exit(0)


def reply(text: str, pieces: list[str]) -> None:
    """A whole answer streamed as `pieces`, written without a flush per line (as fast as a pipe takes it)."""
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": SESSION_ID,
            "timestamp": "2026-11-29T00:00:00Z",
            "cwd": os.getcwd(),
        }
    ]
    lines += [
        {"type": "agent_start"},
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
    ]
    lines += [
        {
            "type": "message_update",
            "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": piece},
        }
        for piece in pieces
    ]
    end = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "usage": usage(),
        "stopReason": "stop",
    }
    lines += [{"type": "message_end", "message": end}, {"type": "agent_end", "messages": []}]
    for line in lines:
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def flood_piece(index: int, size: int = 9) -> str:
    """The text of delta `index` of a flood (`size` chars): numbered, so any loss or reordering shows."""
    head = f"d{index:07d};"
    return head + "." * max(0, size - len(head))


def env_report(prompt: str) -> list[str]:
    """For each variable named in the prompt: absent, or present with its value's length and SHA-256."""
    lines = []
    for name in prompt.split():
        value = os.environ.get(name)
        if value is None:
            lines.append(f"{name}=absent")
        else:
            lines.append(
                f"{name}=present len={len(value)} sha256={hashlib.sha256(value.encode()).hexdigest()}"
            )
    return lines


def bump_state() -> int:
    path = os.environ.get("FAKE_PI_STATE")
    if not path:
        return 1
    count = 1
    if os.path.exists(path):
        with open(path) as handle:
            count = int(handle.read() or "0") + 1
    with open(path, "w") as handle:
        handle.write(str(count))
    return count


#: A scenario's exit code; None is 0.
Exit = int | None


@dataclass(frozen=True)
class Run:
    """What a scenario works from: the argv, the prompt (as read, and decoded) and the cwd."""

    argv: list[str]
    prompt_bytes: bytes
    prompt: str
    cwd: str


def idle_forever() -> None:
    """Stay alive, doing nothing, until killed."""
    while True:
        time.sleep(0.2)


def close_stdout_and_stay() -> None:
    """Close stdout (the bridge sees its end) while the process lives on."""
    sys.stdout.flush()
    os.close(1)
    time.sleep(300)


def tool_output(call_id: str, text: str) -> None:
    """A bash tool's progress event carrying `text`."""
    emit(
        {
            "type": "tool_execution_update",
            "toolCallId": call_id,
            "toolName": "bash",
            "args": {},
            "partialResult": {"content": [{"type": "text", "text": text}]},
        }
    )


def model_error(error: str) -> None:
    """An answer the model failed with `error`, then the run's end."""
    assistant_start()
    assistant_end("", stop="error", error=error)
    finish("")


def answer_verbatim(run: Run, text: str) -> None:
    """A whole run whose answer is `text`, streamed as one delta."""
    start(run.cwd)
    assistant_start()
    delta(text)
    assistant_end(text)
    finish(text)


def text_scenario(run: Run) -> Exit:
    """A short streamed answer (TEXT)."""
    start(run.cwd)
    say(TEXT)
    finish("")
    return None


def echo_scenario(run: Run) -> Exit:
    """Answers with the prompt."""
    answer_verbatim(run, run.prompt)
    return None


def argv_scenario(run: Run) -> Exit:
    """Answers with its argv, as JSON."""
    answer_verbatim(run, json.dumps(run.argv))
    return None


def garbage_scenario(run: Run) -> Exit:
    """Lines that are not JSON, not UTF-8 or not events, between the deltas of an answer."""
    start(run.cwd)
    assistant_start()
    delta("before ")
    raw(b"this is not json\n")
    raw(b'{"truncated": \n')
    raw(b"\xff\xfe invalid utf-8\n")
    raw(b"[1, 2, 3]\n")
    emit({"type": "brand_new_event", "x": 1})
    delta("after")
    assistant_end("before after")
    finish("before after")
    return None


def noterminal_scenario(run: Run) -> Exit:
    """Starts an answer and exits 0 without ending it."""
    start(run.cwd)
    assistant_start()
    delta("partial answer")
    return 0


def crash_tool_scenario(run: Run) -> Exit:
    """Dies by SIGKILL in the middle of a tool call."""
    start(run.cwd)
    say("Running it now.")
    tool_start("call_1", "make build")
    sys.stderr.write("fatal: segmentation fault in tool runner\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    return None


def model_error_retry_scenario(run: Run) -> Exit:
    """A model error, then pi's own retry announced, then a long wait."""
    start(run.cwd)
    assistant_start()
    assistant_end("", stop="error", error="500 upstream exploded")
    emit({"type": "turn_end"})
    emit({"type": "agent_end", "messages": []})
    emit(
        {
            "type": "auto_retry_start",
            "attempt": 1,
            "maxAttempts": 3,
            "delayMs": 2000,
            "errorMessage": "500 upstream exploded",
        }
    )
    time.sleep(60)
    return None


def auth_error_scenario(run: Run) -> Exit:
    """A model error that is not retryable (401)."""
    start(run.cwd)
    model_error("401 invalid api key")
    return None


def flaky_scenario(run: Run) -> Exit:
    """A retryable model error on the first two attempts, an answer on the third."""
    count = bump_state()
    start(run.cwd)
    if count <= 2:
        model_error("503 service unavailable")
    else:
        say(f"Succeeded on attempt {count}.")
        finish("")
    return None


def always_500_scenario(run: Run) -> Exit:
    """A retryable model error on every attempt (each counted)."""
    bump_state()
    start(run.cwd)
    model_error("500 internal server error")
    return None


def slow_scenario(run: Run) -> Exit:
    """Streams a word every 50 ms for a long time."""
    start(run.cwd)
    assistant_start()
    for index in range(10_000):
        delta(f"word{index} ")
        time.sleep(0.05)
    return None


def thinking_delta(text: str) -> None:
    """One delta of the model's thinking."""
    emit(
        {
            "type": "message_update",
            "assistantMessageEvent": {"type": "thinking_delta", "contentIndex": 0, "delta": text},
        }
    )


def thinking_tool_scenario(run: Run) -> Exit:
    """Thinks, then runs `sleep 300` (a real child in its own session) and waits on it."""
    start(run.cwd)
    assistant_start()
    thinking_delta("I should ")
    thinking_delta("sleep.")
    delta("Sleeping.")
    assistant_end(
        "Sleeping.",
        stop="toolUse",
        tool={"id": "call_s", "name": "bash", "arguments": {"command": "sleep 300"}},
    )
    tool_start("call_s", "sleep 300")
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    time.sleep(300)
    return None


def stubborn_scenario(run: Run) -> Exit:
    """Ignores polite signals and leaves stubborn children and a daemon behind."""
    ignore_polite_signals()
    start(run.cwd)
    say("I will not stop.")
    tool_start("call_x", "daemonize")
    stubborn_child(new_session=True)
    stubborn_child(new_session=False)
    double_fork_daemon()
    tool_output("call_x", "children started\n")
    idle_forever()
    return None


def ignore_interrupt_scenario(run: Run) -> Exit:
    """Ignores polite signals in the middle of an answer."""
    ignore_polite_signals()
    start(run.cwd)
    assistant_start()
    delta("ignoring signals")
    idle_forever()
    return None


def close_stdout_scenario(run: Run) -> Exit:
    """Answers, then closes stdout without ending the run and lives on."""
    start(run.cwd)
    say("Closing my output now.")
    close_stdout_and_stay()
    return None


def flood_scenario(run: Run) -> Exit:
    """As fast as the pipe takes it; progress (bytes written) goes to the state file."""
    start(run.cwd)
    assistant_start()
    chunk = "x" * 4000 + " "
    written = 0
    progress = os.environ.get("FAKE_PI_STATE")
    limit = int(os.environ.get("FAKE_PI_FLOOD_BYTES", str(256 * 1024 * 1024)))
    while written < limit:
        delta(chunk)
        written += len(chunk)
        if progress and written % (100 * len(chunk)) == 0:
            with open(progress, "w") as handle:
                handle.write(str(written))
    assistant_end("")
    finish("")
    return None


def fail_then_linger_scenario(run: Run) -> Exit:
    """A retryable model error, then slow to die: SIGTERM is ignored, so stopping takes the grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start(run.cwd)
    model_error("503 service unavailable")
    time.sleep(300)
    return None


def slow_to_stop_scenario(run: Run) -> Exit:
    """A short answer from a pi that ignores SIGTERM (set before it read stdin)."""
    start(run.cwd)
    say("Took my time.")
    finish("")
    return None


def linger_scenario(run: Run) -> Exit:
    """Ends its output, never exits by itself; stopped only by SIGKILL (after the grace)."""
    start(run.cwd)
    say("Done, but staying.")
    finish("")
    close_stdout_and_stay()
    return None


def silent_scenario(run: Run) -> Exit:
    """Starts a run and says nothing more."""
    start(run.cwd)
    time.sleep(300)
    return None


def huge_line_scenario(run: Run) -> Exit:
    """One line of $FAKE_PI_HUGE bytes in the middle of an answer."""
    start(run.cwd)
    assistant_start()
    delta("small ")
    raw(
        b'{"type":"message_update","pad":"'
        + b"x" * (int(os.environ.get("FAKE_PI_HUGE", "70000000")))
        + b'"}\n'
    )
    delta("end")
    assistant_end("small end")
    finish("")
    return None


def leave_background_scenario(run: Run) -> Exit:
    """Answers, leaving a `sleep 300` running in its own session."""
    start(run.cwd)
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    say("I left something running.")
    finish("")
    return None


def escape_tool_scenario(run: Run, environment: str = "") -> Exit:
    """A tool whose grandchild clears its environment (no run token), starts its own session
    and double-forks: neither a walk from pi nor the token finds it. Its pid goes to the file
    named by the prompt."""
    pidfile = run.prompt.strip()
    start(run.cwd)
    say("Escaping now.")
    tool_start("call_e", "escape")
    inner = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 300"
    subprocess.run(["sh", "-c", f"(env -i {environment} setsid sh -c '{inner}' &)"], check=True)
    while not os.path.exists(pidfile):
        time.sleep(0.01)
    tool_output("call_e", "escaped\n")
    idle_forever()
    return None


def escape_with_a_made_up_token_scenario(run: Run) -> Exit:
    """The escape above, claiming a run token of its own invention so as to pass for another
    run's process."""
    return escape_tool_scenario(run, "PI_BRIDGE_RUN_TOKEN=0123456789abcdef0123456789abcdef")


def helper_keeps_stdout_scenario(run: Run) -> Exit:
    """Ends properly and exits 0, while a helper it started keeps the stdout pipe open. The
    helper's pid goes to the file named by the prompt."""
    start(run.cwd)
    say("Done, but my helper lingers.")
    finish("")
    helper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, start_new_session=True)
    with open(run.prompt.strip(), "w") as handle:
        handle.write(str(helper.pid))
    return 0


def unicode_scenario(run: Run) -> Exit:
    """An answer of line separators, astral, combining and escaped characters, in two deltas."""
    start(run.cwd)
    text = 'line\u2028sep\u2029para\u0085next 😀 漢字 e\u0301 "q" \\b'
    assistant_start()
    delta(text[:10])
    delta(text[10:])
    assistant_end(text)
    finish(text)
    return None


def env_scenario(run: Run) -> Exit:
    """Answers with which variables named in the prompt are set (never their values)."""
    lines = env_report(run.prompt)
    reply("\n".join(lines), [line + "\n" for line in lines[:-1]] + lines[-1:])
    return None


def digest_scenario(run: Run) -> Exit:
    """Answers with the length and SHA-256 of the prompt bytes it read."""
    text = f"len={len(run.prompt_bytes)} sha256={hashlib.sha256(run.prompt_bytes).hexdigest()}"
    reply(text, [text])
    return None


def flood_n_scenario(run: Run, spec: str) -> Exit:
    """`flood-N` / `flood-N-S` (spec "N" or "N-S"): N numbered deltas of S chars, written at once."""
    count, _, size = spec.partition("-")
    pieces = [flood_piece(i, int(size or 9)) for i in range(int(count))]
    reply("".join(pieces), pieces)
    return None


def sleep_scenario(run: Run) -> Exit:
    """Starts an answer, then sleeps (a run to cancel)."""
    start(run.cwd)
    assistant_start()
    delta("sleeping")
    time.sleep(300)
    return None


def stderr_env_scenario(run: Run) -> Exit:
    """Exits 1 with nothing on stdout, naming on stderr the prompt's variables that are set."""
    names = " ".join(name for name in run.prompt.split() if name in os.environ)
    sys.stderr.write(f"fake pi: failing on purpose; these variables were set: {names}\n")
    return 1


SCENARIOS: dict[str, Callable[[Run], Exit]] = {
    "text": text_scenario,
    "echo": echo_scenario,
    "argv": argv_scenario,
    "garbage": garbage_scenario,
    "noterminal": noterminal_scenario,
    "crash_tool": crash_tool_scenario,
    "model_error_retry": model_error_retry_scenario,
    "auth_error": auth_error_scenario,
    "flaky": flaky_scenario,
    "always_500": always_500_scenario,
    "slow": slow_scenario,
    "thinking_tool": thinking_tool_scenario,
    "stubborn": stubborn_scenario,
    "ignore_interrupt": ignore_interrupt_scenario,
    "close_stdout": close_stdout_scenario,
    "flood": flood_scenario,
    "fail_then_linger": fail_then_linger_scenario,
    "slow_to_stop": slow_to_stop_scenario,
    "linger": linger_scenario,
    "silent": silent_scenario,
    "huge_line": huge_line_scenario,
    "leave_background": leave_background_scenario,
    "escape_tool": escape_tool_scenario,
    "escape_with_a_made_up_token": escape_with_a_made_up_token_scenario,
    "helper_keeps_stdout": helper_keeps_stdout_scenario,
    "unicode": unicode_scenario,
    "env": env_scenario,
    "digest": digest_scenario,
    "sleep": sleep_scenario,
    "stderr-env": stderr_env_scenario,
}
#: The scenarios that ignore SIGTERM from their start, before they read stdin.
SIGTERM_IGNORED_AT_START = ("slow_to_stop", "linger")
#: The scenarios whose attempts are counted in the file named by the prompt, when it is a path.
COUNTED_BY_PROMPT = ("flaky", "always_500", "flood")


def unknown_scenario(scenario: str) -> Exit:
    """Exits 2, naming the scenario it does not know."""
    sys.stderr.write(f"fake pi: unknown scenario {scenario}\n")
    return 2


def play(scenario: str, run: Run) -> int:
    """Plays `scenario` (a name of SCENARIOS, or `flood-...`) and returns its exit code."""
    if scenario in SCENARIOS:
        code = SCENARIOS[scenario](run)
    elif scenario.startswith("flood-"):
        code = flood_n_scenario(run, scenario.removeprefix("flood-"))
    else:
        code = unknown_scenario(scenario)
    return 0 if code is None else code


def answer_rpc_mode() -> int:
    """`--mode rpc`: refuse it at once, as a pi without it does (the bridge falls back to json),
    or with FAKE_PI_RPC=hang read stdin and say nothing, as an agent that takes the flag for
    something else."""
    if os.environ.get("FAKE_PI_RPC") == "hang":
        sys.stdin.buffer.read()
        return 0
    sys.stderr.write("Error: unknown mode 'rpc'\n")
    return 1


def read_run(argv: list[str], scenario: str) -> Run:
    """Reads the prompt to EOF (as pi does), logs it to $FAKE_PI_PROMPT_LOG, and takes a prompt
    that is a path as the attempt counter of the scenarios that count."""
    prompt_bytes = sys.stdin.buffer.read()
    prompt = prompt_bytes.decode("utf-8", "replace")
    record = os.environ.get("FAKE_PI_PROMPT_LOG")
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(prompt) + "\n")
    if prompt.startswith("/") and scenario in COUNTED_BY_PROMPT:
        os.environ.setdefault("FAKE_PI_STATE", prompt.strip())  # per-test attempt counter
    return Run(argv=argv, prompt_bytes=prompt_bytes, prompt=prompt, cwd=os.getcwd())


def main() -> int:
    """Plays the scenario named by --model (default text) and returns its exit code."""
    argv = sys.argv[1:]
    scenario = argv[argv.index("--model") + 1] if "--model" in argv else "text"
    if "rpc" in argv:
        return answer_rpc_mode()
    if scenario == "usage_error":
        sys.stderr.write("Error: Unknown option --bogus\n")
        return 1
    if scenario in SIGTERM_IGNORED_AT_START:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped only by SIGKILL, after the grace
    return play(scenario, read_run(argv, scenario))


if __name__ == "__main__":
    sys.exit(main())
