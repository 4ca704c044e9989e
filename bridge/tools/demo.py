"""`pi-bridge demo`: one real run through a real bridge process, printed readably."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import IO, Any

from bridge.contract import RUN
from bridge.tools.stdio_client import StdioClient

_COLORS = {
    "assistant": "",
    "assistant.thought": "\033[2m",
    "tool.call": "\033[36m",
    "tool.update": "\033[2;36m",
    "tool.completed": "\033[32m",
    "tool.failed": "\033[31m",
    "terminal.completed": "\033[1;32m",
    "terminal.failed": "\033[1;31m",
    "terminal.cancelled": "\033[1;33m",
}


def _print_message(message: dict[str, Any], out: IO[str]) -> None:
    if message.get("method") != "pi/message":
        return
    params = message["params"]
    kind = params["type"]
    content = params["content"]
    color = _COLORS.get(kind, "\033[35m") if out.isatty() else ""
    reset = "\033[0m" if color else ""
    if kind == "assistant":
        out.write(content["text"])
    elif kind == "assistant.thought":
        out.write(f"\n{color}[thought] {content['text']}{reset}\n")
    elif kind == "tool.call":
        out.write(f"\n{color}[tool.call {content['name']}] {json.dumps(content['arguments'])}{reset}\n")
    elif kind == "tool.update":
        pass
    elif kind in ("tool.completed", "tool.failed"):
        body = content.get("output", content.get("error", ""))
        out.write(f"{color}[{kind}] {body.strip()[:500]}{reset}\n")
    elif kind.startswith("terminal."):
        detail = {k: v for k, v in content.items() if k != "text"}
        out.write(f"\n{color}[{kind}] {json.dumps(detail)}{reset}\n")
    else:
        out.write(f"{color}[{kind}] {json.dumps(content)}{reset}\n")
    out.flush()


def run_demo(prompt: str, *, model: str = "tool", pi_command: str | None = None) -> int:
    """Run `prompt` through the bridge and real pi against the scripted model; print the stream."""
    argv = [sys.executable, "-m", "bridge", "--scripted-model"]
    if pi_command:
        argv += ["--pi-command", pi_command]
    client = StdioClient(argv, env=dict(os.environ))
    out = sys.stdout
    try:
        init = client.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {}})
        answer = client.wait_for(init)
        info = answer["result"]["serverInfo"]
        out.write(
            f"# {info['name']} {info.get('version', '')} — protocol "
            f"{answer['result']['capabilities']['experimental']['piBridge']['protocolVersion']}\n"
        )
        client.notify("initialized", {})
        out.write(f"# prompt: {prompt!r} (scripted model scenario {model!r}; argv {shlex.join(argv)})\n\n")
        run = client.request(RUN, {"prompt": prompt, "model": model})
        response = client.wait_for(run, lambda message: _print_message(message, out))
    finally:
        code = client.close()
    if "error" in response:
        out.write(f"\n# pi/run error: {json.dumps(response['error'])}\n")
        return 1
    result = response["result"]
    out.write(
        f"\n# result: status={result['status']} attempts={result['attempts']} "
        f"stopReason={result.get('stopReason')} usage={json.dumps(result.get('usage'))}\n"
    )
    return 0 if result["status"] == "completed" and code == 0 else 1
