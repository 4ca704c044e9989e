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
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(s, signal.SIG_IGN)
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


def main() -> int:
    argv = sys.argv[1:]
    scenario = argv[argv.index("--model") + 1] if "--model" in argv else "text"
    if "rpc" in argv and os.environ.get("FAKE_PI_RPC") == "hang":
        # like an agent that takes `--mode rpc` for something else: it reads stdin, says nothing
        sys.stdin.buffer.read()
        return 0
    if "rpc" in argv:  # like a pi without --mode rpc: refuse at once (the bridge falls back to json)
        sys.stderr.write("Error: unknown mode 'rpc'\n")
        return 1
    if scenario == "usage_error":
        sys.stderr.write("Error: Unknown option --bogus\n")
        return 1
    if scenario in ("slow_to_stop", "linger"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped only by SIGKILL, after the grace
    prompt_bytes = sys.stdin.buffer.read()
    prompt = prompt_bytes.decode("utf-8", "replace")
    record = os.environ.get("FAKE_PI_PROMPT_LOG")
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(prompt) + "\n")
    if prompt.startswith("/") and scenario in ("flaky", "always_500", "flood"):
        os.environ.setdefault("FAKE_PI_STATE", prompt.strip())  # per-test attempt counter
    cwd = os.getcwd()
    if scenario == "text":
        start(cwd)
        say(TEXT)
        finish("")
    elif scenario == "echo":
        start(cwd)
        assistant_start()
        delta(prompt)
        assistant_end(prompt)
        finish(prompt)
    elif scenario == "argv":
        start(cwd)
        text = json.dumps(argv)
        assistant_start()
        delta(text)
        assistant_end(text)
        finish(text)
    elif scenario == "garbage":
        start(cwd)
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
    elif scenario == "noterminal":
        start(cwd)
        assistant_start()
        delta("partial answer")
        return 0
    elif scenario == "crash_tool":
        start(cwd)
        say("Running it now.")
        tool_start("call_1", "make build")
        sys.stderr.write("fatal: segmentation fault in tool runner\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    elif scenario == "model_error_retry":
        start(cwd)
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
    elif scenario == "auth_error":
        start(cwd)
        assistant_start()
        assistant_end("", stop="error", error="401 invalid api key")
        finish("")
    elif scenario == "flaky":
        count = bump_state()
        start(cwd)
        if count <= 2:
            assistant_start()
            assistant_end("", stop="error", error="503 service unavailable")
            finish("")
        else:
            say(f"Succeeded on attempt {count}.")
            finish("")
    elif scenario == "always_500":
        bump_state()
        start(cwd)
        assistant_start()
        assistant_end("", stop="error", error="500 internal server error")
        finish("")
    elif scenario == "slow":
        start(cwd)
        assistant_start()
        for index in range(10_000):
            delta(f"word{index} ")
            time.sleep(0.05)
    elif scenario == "thinking_tool":
        start(cwd)
        assistant_start()
        emit(
            {
                "type": "message_update",
                "assistantMessageEvent": {"type": "thinking_delta", "contentIndex": 0, "delta": "I should "},
            }
        )
        emit(
            {
                "type": "message_update",
                "assistantMessageEvent": {"type": "thinking_delta", "contentIndex": 0, "delta": "sleep."},
            }
        )
        delta("Sleeping.")
        assistant_end(
            "Sleeping.",
            stop="toolUse",
            tool={"id": "call_s", "name": "bash", "arguments": {"command": "sleep 300"}},
        )
        tool_start("call_s", "sleep 300")
        subprocess.Popen(["sleep", "300"], start_new_session=True)
        time.sleep(300)
    elif scenario == "stubborn":
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        start(cwd)
        say("I will not stop.")
        tool_start("call_x", "daemonize")
        stubborn_child(new_session=True)
        stubborn_child(new_session=False)
        double_fork_daemon()
        emit(
            {
                "type": "tool_execution_update",
                "toolCallId": "call_x",
                "toolName": "bash",
                "args": {},
                "partialResult": {"content": [{"type": "text", "text": "children started\n"}]},
            }
        )
        while True:
            time.sleep(0.2)
    elif scenario == "ignore_interrupt":
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        start(cwd)
        assistant_start()
        delta("ignoring signals")
        while True:
            time.sleep(0.2)
    elif scenario == "close_stdout":
        start(cwd)
        say("Closing my output now.")
        sys.stdout.flush()
        os.close(1)
        time.sleep(300)
    elif scenario == "flood":
        # As fast as the pipe takes it; progress (bytes written) goes to the state file.
        start(cwd)
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
    elif scenario == "fail_then_linger":
        # A retryable model error, then slow to die: SIGTERM is ignored, so stopping takes the grace.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        start(cwd)
        assistant_start()
        assistant_end("", stop="error", error="503 service unavailable")
        finish("")
        time.sleep(300)
    elif scenario == "slow_to_stop":
        start(cwd)
        say("Took my time.")
        finish("")
    elif scenario == "linger":
        # Ends its output, never exits by itself; stopped only by SIGKILL (after the grace).
        start(cwd)
        say("Done, but staying.")
        finish("")
        sys.stdout.flush()
        os.close(1)
        time.sleep(300)
    elif scenario == "silent":
        start(cwd)
        time.sleep(300)
    elif scenario == "huge_line":
        start(cwd)
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
    elif scenario == "leave_background":
        start(cwd)
        subprocess.Popen(["sleep", "300"], start_new_session=True)
        say("I left something running.")
        finish("")
    elif scenario == "escape_tool":
        # A tool whose grandchild clears its environment (no run token), starts its own session
        # and double-forks: neither a walk from pi nor the token finds it. Its pid goes to the
        # file named by the prompt.
        pidfile = prompt.strip()
        start(cwd)
        say("Escaping now.")
        tool_start("call_e", "escape")
        inner = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 300"
        subprocess.run(["sh", "-c", f"(env -i setsid sh -c '{inner}' &)"], check=True)
        while not os.path.exists(pidfile):
            time.sleep(0.01)
        emit(
            {
                "type": "tool_execution_update",
                "toolCallId": "call_e",
                "toolName": "bash",
                "args": {},
                "partialResult": {"content": [{"type": "text", "text": "escaped\n"}]},
            }
        )
        while True:
            time.sleep(0.2)
    elif scenario == "helper_keeps_stdout":
        # Ends properly and exits 0, while a helper it started keeps the stdout pipe open. The
        # helper's pid goes to the file named by the prompt.
        start(cwd)
        say("Done, but my helper lingers.")
        finish("")
        helper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, start_new_session=True)
        with open(prompt.strip(), "w") as handle:
            handle.write(str(helper.pid))
        return 0
    elif scenario == "unicode":
        start(cwd)
        text = 'line\u2028sep\u2029para\u0085next 😀 漢字 e\u0301 "q" \\b'
        assistant_start()
        delta(text[:10])
        delta(text[10:])
        assistant_end(text)
        finish(text)
    elif scenario == "env":
        lines = env_report(prompt)
        reply("\n".join(lines), [line + "\n" for line in lines[:-1]] + lines[-1:])
    elif scenario == "digest":
        text = f"len={len(prompt_bytes)} sha256={hashlib.sha256(prompt_bytes).hexdigest()}"
        reply(text, [text])
    elif scenario.startswith("flood-"):
        count, _, size = scenario.removeprefix("flood-").partition("-")
        pieces = [flood_piece(i, int(size or 9)) for i in range(int(count))]
        reply("".join(pieces), pieces)
    elif scenario == "sleep":
        start(cwd)
        assistant_start()
        delta("sleeping")
        time.sleep(300)
    elif scenario == "stderr-env":
        names = " ".join(name for name in prompt.split() if name in os.environ)
        sys.stderr.write(f"fake pi: failing on purpose; these variables were set: {names}\n")
        return 1
    else:
        sys.stderr.write(f"fake pi: unknown scenario {scenario}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
