"""Turn run options into pi's command line, environment and stdin: the one place pi flags live."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from bridge.agents.pi.trust import trust_flags
from bridge.agents.values import MCP_CONFIG_ENV, LaunchSpec, RunOptions

# The prompt goes through stdin, never argv: pi would read argv words starting with "-" as flags
# and "@" as file attachments, and argv has a size limit. With a non-TTY stdin pi reads it to EOF
# before starting and uses it as the prompt.
BASE_FLAGS: tuple[str, ...] = ("--mode", "json")

# PI_OFFLINE=1 turns off pi's start-up network calls (update checks); the model request itself is
# unaffected. It is an environment variable rather than `--offline` because an unknown flag makes
# older pi exit 1, while an unknown variable is harmless.
BASE_ENV: dict[str, str] = {"PI_OFFLINE": "1"}

# The bridge's own extension (package data), loaded on every pi the bridge starts: its
# `tool_call` handler asks the bridge before each tool (extension/index.ts says how).
GATE_EXTENSION: Final = Path(__file__).resolve().parent / "extension" / "index.ts"


def pi_env(options: RunOptions) -> dict[str, str]:
    """The environment pi gets on top of the bridge's: the offline switch, and the file the
    extension registers the conversation's MCP servers from (a path: never their secrets)."""
    env = dict(BASE_ENV)
    if options.mcp_config:
        env[MCP_CONFIG_ENV] = options.mcp_config
    return env


def extension_flags() -> list[str]:
    """The flags that load the bridge's gate extension (after `pi_flags`, in every launch)."""
    return ["-e", str(GATE_EXTENSION)]


def pi_flags(options: RunOptions, *, live: bool = False, new_session_id: str | None = None) -> list[str]:
    """pi's flags for one run (`--mode json`) or one live pi (`live`: `--mode rpc`), in a stable order.

    A live pi resumes `options.session_id` or starts its session under `new_session_id`; only a
    one-shot run asks pi to continue the latest session.
    """
    flags = ["--mode", "rpc"] if live else list(BASE_FLAGS)
    if options.provider:
        flags += ["--provider", options.provider]
    if options.model:
        flags += ["--model", options.model]
    if options.thinking:
        flags += ["--thinking", options.thinking]
    if options.tools is not None:
        flags += ["--tools", ",".join(options.tools)] if options.tools else ["--no-tools"]
    if options.session_id:
        flags += ["--session", options.session_id]
    elif new_session_id:
        flags += ["--session-id", new_session_id]
    elif options.continue_session and not live:
        flags += ["--continue"]
    return flags


def launch_spec(command: tuple[str, ...], options: RunOptions) -> LaunchSpec:
    """The full launch of one pi attempt: argv, cwd, extra environment and the prompt as stdin."""
    return LaunchSpec(
        argv=(*command, *pi_flags(options), *trust_flags(options.trusted), *extension_flags()),
        cwd=options.cwd,
        env=pi_env(options),
        stdin=options.prompt.encode("utf-8"),
    )
