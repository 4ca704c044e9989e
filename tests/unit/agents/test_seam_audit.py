"""The grep audit of the seam: no pi name (flag, event, variable, file) in bridge/ outside
bridge/agents/pi/, no Claude Code name outside bridge/agents/claude/, and neither imports the other.

It reads every line (code, docstrings and comments, as `grep` would). The allowlists are short and
explicit: the words both agents' streams share, the adapter index that imports every package, and
the scripted model, a model server standing in for both agents' providers.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.env import ROOT

BRIDGE = ROOT / "bridge"

PI_NAMES = re.compile(
    r"--mode\b|--session(?![-\w])|--no-session|--no-tools|--provider\b|--thinking\b|--list-models"
    r"|message_update|message_end\b|agent_start|agent_end|turn_start|turn_end|tool_execution_"
    r"|auto_retry_|auto_compaction|PI_CODING_AGENT|PI_OFFLINE|~/\.pi\b|\.pi/|models\.json|auth\.json"
)
CLAUDE_NAMES = re.compile(
    r"CLAUDE_\w+|ANTHROPIC_\w+|stream_event|stream-json|api_retry|is_error|--permission-mode|--resume"
    r"|--session-id|--output-format|--include-partial-messages|--allowedTools|\btool_use\b|\btool_result\b"
    r"|content_block|~/\.claude|\.claude/|projects/"
)
# Words both agents use, so naming them is no leak: pi has `--session-id` too, and reads
# Anthropic's key variables like every provider's.
GENERIC = {"--session-id", "ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN"}
# Files that may name an agent's things, and why.
PI_ALLOWED = {
    "agents/__init__.py": "the adapter index: it imports every agent package",
    "agents/codex/__init__.py": "Codex names its own login file auth.json too",
    "scripted_model/__main__.py": "the scripted model's command line: it can write pi's models.json",
    "scripted_model/pi_config.py": "the scripted model's pi set-up: it writes pi's models.json",
    "scripted_model/scenarios.py": "a model standing in for pi's provider (its reply names pi's events)",
    "agents/acp/catalog.py": "the ACP catalog's pi-acp entry: pi-acp runs pi, pointed at a model by its agent dir",
}
CLAUDE_ALLOWED = {
    "agents/__init__.py": "the adapter index: it imports every agent package",
    "scripted_model/__init__.py": "the scripted model's index: it re-exports the Anthropic scenario texts",
    "scripted_model/formats.py": "a model server standing in for Claude Code's Anthropic endpoint",
    "scripted_model/request_body.py": "it reads Anthropic requests' tool_result blocks",
    "scripted_model/scenarios.py": "it reads Claude Code's tool schemas, and answers in Anthropic's style",
    "agents/acp/catalog.py": "the ACP catalog's claude-acp entry: the Claude adapter's Claude Code environment",
}


def _offenders(pattern: re.Pattern[str], package: str, allowed: dict[str, str]) -> list[str]:
    found = []
    for path in sorted(BRIDGE.rglob("*.py")):
        relative = path.relative_to(BRIDGE)
        if relative.parts[:2] == ("agents", package) or str(relative) in allowed:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in pattern.finditer(line):
                if match.group(0) not in GENERIC:
                    found.append(f"bridge/{relative}:{number}: {match.group(0)!r} in {line.strip()}")
    return found


def test_no_pi_flag_event_variable_or_file_name_outside_bridge_agents_pi() -> None:
    assert _offenders(PI_NAMES, "pi", PI_ALLOWED) == []


def test_no_claude_flag_event_variable_or_file_name_outside_bridge_agents_claude() -> None:
    assert _offenders(CLAUDE_NAMES, "claude", CLAUDE_ALLOWED) == []


def test_neither_agent_package_imports_the_other() -> None:
    imports = re.compile(r"^\s*(?:from|import)\s+bridge\.agents\.(pi|claude)\b")
    crossing = []
    for package, other in (("pi", "claude"), ("claude", "pi")):
        for path in sorted((BRIDGE / "agents" / package).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                match = imports.match(line)
                if match and match.group(1) == other:
                    crossing.append(f"{Path(path).relative_to(ROOT)}:{number}: {line.strip()}")
    assert crossing == []


# The core modules that import an agent package: the index only. The engines reach an agent's
# live mode through the adapter (`AgentAdapter.live_mode`). The set may shrink, never grow.
AGENT_IMPORTERS = {"agents/__init__.py"}


def test_only_the_index_imports_an_agent_package() -> None:
    imports = re.compile(r"^\s*(?:from|import)\s+bridge\.agents\.(?:pi|claude)\b", re.MULTILINE)
    importers = {
        str(path.relative_to(BRIDGE))
        for path in BRIDGE.rglob("*.py")
        if path.relative_to(BRIDGE).parts[:2] not in (("agents", "pi"), ("agents", "claude"))
        and imports.search(path.read_text(encoding="utf-8"))
    }
    assert importers <= AGENT_IMPORTERS, f"new importers: {sorted(importers - AGENT_IMPORTERS)}"
