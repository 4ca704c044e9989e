"""Choosing the agent: the index of adapters, initializationOptions.agents, and the version probe."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bridge import agents
from bridge.agents.values import RunOptions
from bridge.config import BridgeConfig, resolve_config
from tests.support.env import ROOT


def test_every_known_agent_builds_with_pi_first() -> None:
    assert agents.agent_names()[0] == "pi"
    for name in agents.agent_names():
        adapter = agents.build_adapter(name)
        assert adapter.name == name and adapter.default_command


def test_an_unknown_agent_or_permission_mode_is_a_clear_error() -> None:
    with pytest.raises(agents.UnknownAgentError, match="unknown agent 'nope'; known: pi, claude"):
        agents.build_adapter("nope")
    with pytest.raises(agents.UnknownAgentError, match="permissionMode 'yolo'"):
        agents.build_adapter("claude", {"permission_mode": "yolo"})


def test_both_agents_have_a_live_mode_and_claude_code_no_warm_launch() -> None:
    assert agents.build_adapter("pi").live_mode() is not None
    assert agents.build_adapter("claude").live_mode() is not None
    assert agents.build_adapter("claude").warm_launches(("claude",), _options(), None) == []


def test_initialization_options_name_agents_and_warn_on_an_empty_command() -> None:
    raw = {
        "agents": {"claude": ["/opt/claude"], "pi": []},
        "defaultAgent": "claude",
        "allowedTools": ["Bash"],
    }
    config, warnings = resolve_config(BridgeConfig(), raw)
    assert config.agents == {"claude": ("/opt/claude",)}
    assert config.default_agent == "claude" and config.allowed_tools == ("Bash",)
    assert warnings == ["initializationOptions.agents.pi: an empty command; using the default"]


def test_the_object_form_sets_command_protocol_and_env_and_a_bad_entry_warns_naming_its_field() -> None:
    raw = {
        "agents": {
            "mine": {"command": ["my-agent", "--acp"], "protocol": "acp", "env": {"K": "v"}},
            "claude-work": {"command": ["/opt/claude"], "protocol": "claude"},
            "gemini": ["/opt/gemini", "--acp"],
            "typo": {"command": ["x"], "protocol": "acp", "evn": {}},
            "wrong": {"command": ["x"], "protocol": "telnet"},
            "plain": "not-a-list",
        }
    }
    config, warnings = resolve_config(BridgeConfig(), raw)
    assert config.agents == {
        "mine": ("my-agent", "--acp"),
        "claude-work": ("/opt/claude",),
        "gemini": ("/opt/gemini", "--acp"),
    }, "a bad entry falls back alone"
    assert config.agent_protocols == {"mine": "acp", "claude-work": "claude"}
    assert config.agent_envs == {"mine": {"K": "v"}}
    assert sorted(w.split(":")[0] for w in warnings) == [
        "initializationOptions.agents.plain",
        "initializationOptions.agents.typo.evn",
        "initializationOptions.agents.wrong.protocol",
    ], warnings
    mine = agents.build_adapter("mine", {"protocol": "acp", "command": ("my-agent", "--acp")})
    assert mine.name == "mine" and mine.live_mode() is not None
    work = agents.build_adapter("claude-work", {"protocol": "claude"})
    assert work.name == "claude-work" and work.display_name == "Claude Code"
    assert agents.probe("mine", ("my-agent",), None, "acp").protocol == "acp"
    with pytest.raises(
        agents.UnknownAgentError, match=r"needs a protocol in initializationOptions\.agents\.x"
    ):
        agents.build_adapter("x", {"command": ("x",)})


def test_codex_gemini_and_opencode_have_default_commands() -> None:
    assert agents.build_adapter("codex").default_command == ("codex",)
    assert agents.build_adapter("gemini").default_command == ("gemini", "--acp")
    assert agents.build_adapter("opencode").default_command == ("opencode", "acp")


def test_the_version_comes_from_the_npm_package_whose_bin_the_command_is(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "tool"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"version": "9.9.9", "bin": {"tool": "bin/tool.js"}}))
    script = package / "bin" / "tool.js"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    found = agents.probe("tool", (str(script),))
    assert found.found is True and found.version == "9.9.9"
    other = package / "bin" / "other.js"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert agents.probe("other", (str(other),)).version is None, "not the package's bin: no version"
    assert agents.probe("missing", ("no-such-command-here",)).found is False


def _options() -> RunOptions:
    return RunOptions(prompt="p", cwd="/")


# Claude Code's events, environment, flags and file layout; the adapter index (agents/__init__.py) names
# the package, the scripted model, a model server, reads both agents' tool schemas, and the ACP
# catalog's claude-acp entry is the environment of the Claude ACP adapter (data, one entry); the
# contract names "claude" among the protocols of initializationOptions.agents (a wire value).
CLAUDE_SPECIFIC = re.compile(
    r'CLAUDE_|stream_event|api_retry|is_error|--permission-mode|"claude"|bridge\.agents\.claude|projects/'
)
CLAUDE_ALLOWED = {
    "agents/__init__.py",
    "scripted_model/http_server.py",
    "scripted_model/scenarios.py",
    "agents/acp/catalog.py",
    "contract.py",
}


def test_no_claude_event_env_flag_or_layout_outside_its_package() -> None:
    offenders = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        relative = path.relative_to(ROOT / "bridge")
        if relative.parts[:2] == ("agents", "claude") or str(relative) in CLAUDE_ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if CLAUDE_SPECIFIC.search(line.split("#", 1)[0]):
                offenders.append(f"bridge/{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_a_session_the_bridge_named_starts_under_its_id_until_stored_then_resumes() -> None:
    from bridge.agents.claude.command import claude_flags

    named = RunOptions(prompt="p", cwd="/tmp", session_id="0f6c", new_session=True)
    assert claude_flags(named, "acceptEdits")[-2:] == ["--session-id", "0f6c"]
    stored = RunOptions(prompt="p", cwd="/tmp", session_id="0f6c", new_session=True, resumed=True)
    assert claude_flags(stored, "acceptEdits")[-2:] == ["--resume", "0f6c"]
    assert claude_flags(RunOptions(prompt="p", cwd="/tmp", session_id="0f6c"), "acceptEdits")[-2:] == [
        "--resume",
        "0f6c",
    ]


def test_starting_a_session_that_exists_already_is_a_session_error_not_retried() -> None:
    from bridge.agents.claude.errors import classify_exit

    stderr = "Error: Session ID 9d308467-a902-4e03-90e8-7485da355b06 is already in use.\n"
    assert classify_exit(1, stderr) == ("session", False)


def test_a_claude_retry_cuts_the_session_back_or_starts_the_one_the_run_started_again(tmp_path: Path) -> None:
    from bridge.agents.claude import ClaudeAgent
    from bridge.agents.claude.sessions import project_folder

    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    folder = tmp_path / "projects" / project_folder("/work")
    folder.mkdir(parents=True)
    resumed = folder / "9d308467-a902-4e03-90e8-7485da355b06.jsonl"
    resumed.write_bytes(b'{"type":"user","message":{"role":"user","content":"earlier"}}\n')
    before = resumed.read_bytes()
    claude = ClaudeAgent()
    options = RunOptions(prompt="p", cwd="/work", session_id=resumed.stem, resumed=True)
    checkpoint = claude.checkpoint_session(options, env)
    assert checkpoint is not None and (checkpoint.path, checkpoint.size) == (str(resumed), len(before))
    with resumed.open("ab") as stream:
        stream.write(b'{"type":"user","message":{"role":"user","content":"the failed prompt"}}\n')
    assert claude.rewind_session(checkpoint, resumed.stem, options, env) == options
    assert resumed.read_bytes() == before

    new = RunOptions(prompt="p", cwd="/work")
    started = folder / "0c1e2b57-5a2c-4c2b-9a57-0e3f6f0b1c2d.jsonl"
    checkpoint = claude.checkpoint_session(new, env)
    started.write_bytes(b'{"type":"user","message":{"role":"user","content":"the failed prompt"}}\n')
    retry = claude.rewind_session(checkpoint, started.stem, new, env)
    assert not started.exists() and resumed.read_bytes() == before
    assert (retry.session_id, retry.new_session, retry.resumed) == (started.stem, True, False)
    assert claude.checkpoint_session(RunOptions(prompt="p", cwd="/work", session_id="../x"), env) is None


@pytest.mark.parametrize(
    ("thinking", "effort"), [("minimal", ["--effort", "low"]), ("xhigh", ["--effort", "xhigh"]), ("off", [])]
)
def test_a_run_s_thinking_level_is_claude_code_s_effort(thinking: str, effort: list[str]) -> None:
    from bridge.agents.claude.command import model_and_tool_flags

    options = RunOptions(prompt="p", cwd="/tmp", model="sonnet", thinking=thinking)  # type: ignore[arg-type]
    assert model_and_tool_flags(options, ()) == ["--model", "sonnet", *effort]
