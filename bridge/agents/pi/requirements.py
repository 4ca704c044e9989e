"""What pi needs to run and how to install it: version floors, the npm package, provider key names.

`pi-bridge doctor` and the editors' health checks read these; nothing here starts a process.
"""

from __future__ import annotations

import re

# The npm package that ships the `pi` command (renamed from @mariozechner/pi-coding-agent).
PI_NPM_PACKAGE = "@earendil-works/pi-coding-agent"
PI_INSTALL_COMMAND = f"npm install -g {PI_NPM_PACKAGE}"
PI_DOCS_URL = f"https://www.npmjs.com/package/{PI_NPM_PACKAGE}"

# The oldest pi the bridge is tested against in CI (`--mode json` and `--mode rpc`).
PI_MIN_VERSION = (1, 6, 0)
# pi 1.6's package.json: "engines": {"node": ">=22.19.0"}; older Node fails at start-up.
NODE_MIN_VERSION = (22, 19, 0)
NODE_INSTALL_HINT = "install Node >= 22.19 (https://nodejs.org/, or `npm install -g node@22`)"

# Where pi keeps models.json, settings.json and auth.json unless PI_CODING_AGENT_DIR says otherwise.
AGENT_DIR_ENV = "PI_CODING_AGENT_DIR"
DEFAULT_AGENT_DIR = "~/.pi/agent"
# The files that make up pi's model configuration (copied, never written, by the doctor).
MODEL_CONFIG_FILES = ("models.json", "settings.json", "auth.json")

# Start-up without network calls (update checks); harmless on older pi (bridge/agents/pi/command.py).
OFFLINE_ENV = {"PI_OFFLINE": "1"}

# The environment variables pi reads provider API keys from (pi's docs/providers.md).
PROVIDER_KEY_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_CLOUD_API_KEY",
    "OPENROUTER_API_KEY",
    "AI_GATEWAY_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "CEREBRAS_API_KEY",
    "XAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "FIREWORKS_API_KEY",
    "TOGETHER_API_KEY",
    "NVIDIA_API_KEY",
    "MOONSHOT_API_KEY",
    "KIMI_API_KEY",
    "ZAI_API_KEY",
    "MINIMAX_API_KEY",
    "HF_TOKEN",
    "COPILOT_GITHUB_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
)

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first `X.Y.Z` in `text` (`v22.19.0`, `1.6.0`), or None."""
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def format_version(version: tuple[int, ...]) -> str:
    """`(22, 19, 0)` as `22.19.0`."""
    return ".".join(str(part) for part in version)
