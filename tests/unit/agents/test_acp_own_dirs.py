"""What the ACP catalog says a whole-agent sandbox must leave each agent: its own state dirs and
the variables its model needs; an agent it knows nothing of cannot be sandboxed."""

from __future__ import annotations

from bridge.agents.acp import build, build_custom
from bridge.agents.seam import ConfinedWhole


def test_each_catalog_agent_names_its_own_dirs_and_model_variables() -> None:
    env = {"HOME": "/h", "XDG_DATA_HOME": "/x/data", "CLAUDE_CONFIG_DIR": "/c", "PROBE_TOKEN": "t"}
    env |= {"ANTHROPIC_API_KEY": "k", "OPENCODE_CONFIG_CONTENT": "{}", "GEMINI_API_KEY": "g"}
    opencode, claude, gemini, pi = (build(name) for name in ("opencode", "claude-acp", "gemini", "pi-acp"))
    for agent in (opencode, claude, gemini, pi):
        assert isinstance(agent, ConfinedWhole) and agent.can_sandbox
    assert opencode.own_dirs(env) == (
        "/x/data/opencode",
        "/h/.config/opencode",
        "/h/.cache/opencode",
        "/h/.local/state/opencode",
    )
    assert claude.own_dirs(env) == ("/c", "/h/.cache/claude-cli-nodejs")
    assert gemini.own_dirs(env) == ("/h/.gemini",)
    assert pi.own_dirs(env) == ("/h/.pi/agent", "/h/.pi/pi-acp")
    assert set(claude.model_vars(env)) == {"ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"}
    assert set(opencode.model_vars(env)) == {"OPENCODE_CONFIG_CONTENT", "XDG_DATA_HOME"}
    assert set(gemini.model_vars(env)) == {"GEMINI_API_KEY"}
    assert "PROBE_TOKEN" not in pi.model_vars(env), "no agent keeps a credential its model does not use"


def test_an_acp_agent_the_catalog_does_not_know_cannot_be_sandboxed() -> None:
    custom = build_custom("mine", ("my-agent", "--acp"))
    assert custom.can_sandbox is False and custom.own_dirs({"HOME": "/h"}) == ()


def test_the_launch_is_prefixed_by_the_run_s_sandbox() -> None:
    from bridge.agents.values import RunOptions

    agent = build("opencode")
    plain = agent.launch_spec(("opencode", "acp"), RunOptions(prompt="p", cwd="/w"))
    boxed = agent.launch_spec(
        ("opencode", "acp"), RunOptions(prompt="p", cwd="/w", launch_prefix=("bwrap", "--"))
    )
    assert plain.argv == ("opencode", "acp") and boxed.argv == ("bwrap", "--", "opencode", "acp")
