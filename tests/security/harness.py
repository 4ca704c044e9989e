"""The red team's bench: a fake HOME full of planted secrets, a bridge over raw stdio that keeps
every byte it sends, and the `script` scenario that makes the model's tool calls.

Every test judges from the disk, from every frame the bridge sent the client (`HostileBridge.raw`),
and from every request the scripted model received, never from what the bridge says of itself.
The HOME is outside /tmp: the sandbox's /tmp is private, so a HOME under it would be hidden whole
and prove nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir
from tests.support.env import CLAUDE_BIN, WAIT
from tests.support.raw import Message, RawBridge

#: The planted secrets: none of them may reach the client or the model, in any frame.
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- redteam-planted-ssh-key-4f1d9b"
BRIDGE_KEY = "redteam-bridge-env-key-93b1c7"
INIT_KEY = "redteam-init-env-key-c07e52"
MCP_SECRET = "redteam-mcp-secret-5a2f88"
AUTH_KEY = "redteam-auth-json-key-e6d401"
SECRETS = {
    "ssh key": "redteam-planted-ssh-key-4f1d9b",
    "bridge env key": BRIDGE_KEY,
    "initializationOptions.env key": INIT_KEY,
    "MCP secret": MCP_SECRET,
    "auth.json key": AUTH_KEY,
}
#: The variable names the keys are planted under (the bridge's env, initializationOptions.env).
BRIDGE_KEY_VAR = "REDTEAM_PROBE_API_KEY"
INIT_KEY_VAR = "REDTEAM_INIT_API_KEY"

SANDBOX = {"mode": "workspace-write", "network": False}
PERMISSIONS = {"experimental": {"piBridge": {"permissions": True}}}
RUN_WAIT = 90.0
_BASE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()


def outside_tmp(prefix: str) -> Path:
    """A fresh directory outside /tmp (the sandbox's /tmp is private)."""
    return Path(tempfile.mkdtemp(prefix=f"pi-bridge-redteam-{prefix}-", dir=_BASE)).resolve()


@dataclass
class FakeHome:
    """A HOME with a planted SSH key, pi's agent dir (the scripted model's, with an auth.json
    holding a key), and a .bashrc; and the bridge's own state dir beside it."""

    root: Path
    state: Path

    @property
    def ssh_key(self) -> Path:
        return self.root / ".ssh" / "id_rsa"

    @property
    def agent_dir(self) -> Path:
        return self.root / ".pi" / "agent"

    @property
    def bashrc(self) -> Path:
        return self.root / ".bashrc"

    def workspace(self, name: str) -> Path:
        """A fresh workspace outside the HOME (and outside /tmp)."""
        folder = self.root.parent / f"{self.root.name}-ws-{name}"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        return folder

    def remove(self) -> None:
        for folder in self.root.parent.glob(f"{self.root.name}-ws-*"):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)


BASHRC = "# the user's own .bashrc\n"


def plant_home(model: ScriptedModelServer) -> FakeHome:
    """A fake HOME with every planted secret (see the module)."""
    home = FakeHome(outside_tmp("home"), outside_tmp("state"))
    home.ssh_key.parent.mkdir(mode=0o700)
    home.ssh_key.write_text(SSH_KEY + "\n")
    home.ssh_key.chmod(0o600)
    write_pi_agent_dir(home.agent_dir, model.base_url)
    (home.agent_dir / "auth.json").write_text(json.dumps({"anthropic": {"type": "api_key", "key": AUTH_KEY}}))
    home.bashrc.write_text(BASHRC)
    return home


Answer = Callable[[Message], Any]


def reject_all(request: Message) -> Any:
    """Reject every approval (and every fallback dialog)."""
    if request["method"] == "window/showMessageRequest":
        actions = [a["title"] for a in request["params"].get("actions") or []]
        return {"title": "Deny"} if "Deny" in actions else None
    if request["method"] == "pi/requestPermission":
        options = request["params"]["options"]
        reject = [o["optionId"] for o in options if o["kind"] == "reject_once"]
        return {"optionId": reject[0]} if reject else {"outcome": "cancelled"}
    if request["method"] == "pi/ask":
        return {"cancelled": True}
    return None


def choose_kind(kind: str) -> Answer:
    """Answer an approval with its option of `kind` (e.g. "allow_always")."""

    def answer(request: Message) -> Any:
        if request["method"] != "pi/requestPermission":
            return reject_all(request)
        options = request["params"]["options"]
        return {"optionId": next(o["optionId"] for o in options if o["kind"] == kind)}

    return answer


class HostileBridge(RawBridge):
    """A bridge over raw stdio that keeps every byte it sends and answers its requests with
    `answer` (which a test may replace)."""

    def __init__(self, env: dict[str, str], args: list[str] | None = None, log: Path | None = None) -> None:
        self.raw: list[bytes] = []
        self.asked: list[Message] = []
        self.answer: Answer = reject_all
        self._raw_lock = threading.Lock()
        #: Where the bridge's log (its stderr) goes: secrets may not reach it either.
        self.log = log
        super().__init__(args, env, stderr_file=log)
        self.on_request = self._on_request

    def received(self, now: float, bodies: list[bytes]) -> None:
        with self._raw_lock:
            self.raw.extend(bodies)
        super().received(now, bodies)

    def _on_request(self, request: Message) -> None:
        self.asked.append(request)
        self.answer_request(request["id"], self.answer(request))

    def answer_request(self, msg_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def sent_text(self, since: int = 0) -> str:
        """Every byte sent to the client since frame `since`, decoded (JSON escapes undone too)."""
        with self._raw_lock:
            bodies = self.raw[since:]
        return "\n".join(_both_spellings(body) for body in bodies)

    def mark(self) -> int:
        with self._raw_lock:
            return len(self.raw)

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log is not None and self.log.exists() else 0

    def log_text(self, since: int = 0) -> str:
        """The bridge's log from byte `since` (what it wrote so far)."""
        if self.log is None or not self.log.exists():
            return ""
        with self.log.open("rb") as handle:
            handle.seek(since)
            return handle.read().decode("utf-8", errors="replace")


def _both_spellings(body: bytes) -> str:
    """A frame's bytes as sent, and its JSON with the escapes undone (a key split by `\\n` or
    escaped as `\\u00..` still shows)."""
    text = body.decode("utf-8", errors="replace")
    try:
        decoded = json.dumps(json.loads(body), ensure_ascii=False)
    except ValueError:
        decoded = ""
    return text + "\n" + decoded


def model_text(model: ScriptedModelServer, since: int = 0) -> str:
    """Every request the scripted model received since request `since`, as text."""
    return "\n".join(json.dumps(r["body"], ensure_ascii=False) for r in model.requests[since:])


@dataclass
class Seen:
    """What the client and the model got during one piece of a test."""

    frames: str
    requests: str
    asked: list[Message] = field(default_factory=list)
    log: str = ""

    def leaked(self) -> list[str]:
        """Which planted secrets reached the client or the model."""
        found = []
        for name, secret in SECRETS.items():
            if secret in self.frames:
                found.append(f"{name} -> client")
            if secret in self.requests:
                found.append(f"{name} -> model")
            if secret in self.log:
                found.append(f"{name} -> the bridge's log")
        return found

    def permission_requests(self, tool: str | None = None) -> list[dict[str, Any]]:
        """The params of every pi/requestPermission sent (of `tool` if given)."""
        return [
            m["params"]
            for m in self.asked
            if m["method"] == "pi/requestPermission" and (tool is None or m["params"]["tool"] == tool)
        ]


class Bench:
    """One bridge over stdio, the scripted model it talks to, and the fake HOME."""

    def __init__(self, bridge: HostileBridge, model: ScriptedModelServer, home: FakeHome) -> None:
        self.bridge = bridge
        self.model = model
        self.home = home
        #: What every run's params hold unless a test says otherwise (Claude Code takes no provider).
        self.defaults: dict[str, Any] = {"provider": "fake"}

    def script(self, cwd: Path, calls: list[list[Any]], **params: Any) -> tuple[Message, list[Message], Seen]:
        """One run of the `script` scenario making `calls` in `cwd`: its answer, its pi/messages,
        and everything the client and the model got meanwhile."""
        frames, requests, asked = self.bridge.mark(), len(self.model.requests), len(self.bridge.asked)
        log = self.bridge.log_size()
        run = {**self.defaults, "prompt": json.dumps(calls), "model": "script", "cwd": str(cwd), **params}
        answer = self.bridge.call("pi/run", run, timeout=RUN_WAIT)
        run_id = (answer.get("result") or {}).get("runId") or (answer.get("error", {}).get("data") or {}).get(
            "runId"
        )
        messages = self.bridge.run_messages(run_id) if run_id else []
        seen = Seen(
            self.bridge.sent_text(frames),
            model_text(self.model, requests),
            list(self.bridge.asked[asked:]),
            self.bridge.log_text(log),
        )
        return answer, messages, seen

    def call(self, method: str, params: Any) -> Any:
        answer = self.bridge.call(method, params, timeout=WAIT)
        assert "result" in answer, answer
        return answer["result"]


def bridge_env(home: FakeHome, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The bridge's environment: the fake HOME, its own state dir, a key variable."""
    return {
        "HOME": str(home.root),
        STATE_DIR_ENV: str(home.state),
        BRIDGE_KEY_VAR: BRIDGE_KEY,
        **(extra or {}),
    }


def pi_options(home: FakeHome, **more: Any) -> dict[str, Any]:
    """initializationOptions for pi: its agent dir in the fake HOME and a key variable."""
    env = {"PI_CODING_AGENT_DIR": str(home.agent_dir), INIT_KEY_VAR: INIT_KEY}
    return {"env": env, "warmPool": False, **more}


def claude_options(home: FakeHome, model: ScriptedModelServer, **more: Any) -> dict[str, Any]:
    """initializationOptions for Claude Code against the scripted model, its config in the HOME."""
    config = home.root / ".claude"
    config.mkdir(exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": model.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "scripted-model-key",
        "CLAUDE_CONFIG_DIR": str(config),
        INIT_KEY_VAR: INIT_KEY,
    }
    return {"env": env, "warmPool": False, **more}


def claude_path() -> str:
    """A PATH with Claude Code first."""
    import os

    return os.pathsep.join([str(CLAUDE_BIN.parent), os.environ.get("PATH", "")])


def start_bench(
    home: FakeHome,
    model: ScriptedModelServer,
    options: dict[str, Any],
    capabilities: dict[str, Any] | None = None,
    *,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Bench]:
    """A bench for a module: the bridge started, initialized, and closed (no run left) after."""
    log = Path(tempfile.mkstemp(prefix="bridge-", suffix=".log", dir=home.state.parent)[1])
    bridge = HostileBridge(bridge_env(home, env), args, log)
    try:
        bridge.initialize(options, capabilities)
        yield Bench(bridge, model, home)
    finally:
        bridge.close()
        log.unlink(missing_ok=True)


def run_texts(messages: list[Message]) -> str:
    """Every text of a run's pi/messages (tool outputs, errors, the model's answer) as one string."""
    return json.dumps(messages, ensure_ascii=False)


def final_answer(model: ScriptedModelServer, since: int) -> list[str]:
    """The tool results the model was given in its requests since `since` (what it saw)."""
    from bridge.scripted_model.request_body import tool_results_since_user

    results: list[str] = []
    for request in model.requests[since:]:
        if request["body"]:
            results = tool_results_since_user(request["body"])
    return results
