#!/usr/bin/env bash
# Install everything pi-bridge needs to run and test, inside the checkout (idempotent):
#   .venv/   Python 3.11+ virtualenv with pi-bridge (editable) and its test extras
#   .tools/  Node 22 (the npm package `node@22`) and pi 1.6.0 from the npm registry
#   .tools-claude/  Claude Code 2.1.197 from the npm registry (its native binary comes in the
#            optional dependency @anthropic-ai/claude-code-linux-x64); a prefix of its own
#            because .tools may be shared between checkouts
#   .tools-agents/  Codex, OpenCode and Gemini CLI (pinned) from the npm registry: the other agents
#            the tests drive offline against the scripted model (docs/agents-facts.md)
#   .tools-acp/  the ACP agents from the npm registry, pinned: pi-acp 0.0.34 (drives pi) and
#            claude-agent-acp 0.101.0 (drives its own bundled Claude Code)
#   bubblewrap from the distribution's packages when run as root on Debian/Ubuntu (else a note)
# `--lean` (the demo's): the bridge, Node 22 and pi only; no test extras, Claude Code, the other
# agents, ACP agents or bubblewrap.
# Needs: python3 (>= 3.11) with venv, and npm (any Node >= 18) to fetch Node 22.
set -euo pipefail
cd "$(dirname "$0")/.."
lean=0
[ "${1:-}" = "--lean" ] && lean=1

PI_PACKAGE="${PI_PACKAGE:-@earendil-works/pi-coding-agent@1.6.0}"
NODE_PACKAGE="${NODE_PACKAGE:-node@22}"
CLAUDE_PACKAGE="${CLAUDE_PACKAGE:-@anthropic-ai/claude-code@2.1.197}"
CODEX_PACKAGE="${CODEX_PACKAGE:-@openai/codex@0.171.0}"
OPENCODE_PACKAGE="${OPENCODE_PACKAGE:-opencode-ai@1.18.33}"
GEMINI_PACKAGE="${GEMINI_PACKAGE:-@google/gemini-cli@0.61.0}"
PI_ACP_PACKAGE="${PI_ACP_PACKAGE:-pi-acp@0.0.34}"
CLAUDE_ACP_PACKAGE="${CLAUDE_ACP_PACKAGE:-@agentclientprotocol/claude-agent-acp@0.101.0}"

# The Python side and the npm side do not depend on each other: they install at the same time,
# each npm prefix in its own job (npm's cache is safe to share), and set-up waits for every job.
jobs=()
# What the venv holds, and for which pyproject.toml: a re-run with nothing new skips pip.
stamp=.venv/.pi-bridge-setup
wanted="$([ "$lean" = 1 ] && echo lean || echo full) $(cksum <pyproject.toml | cut -d' ' -f1)"
python_side() {
  if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "$wanted" ] || [ "$(cat "$stamp")" = "full ${wanted#* }" ]; }; then
    return 0
  fi
  if [ "$lean" = 1 ] && [ ! -x .venv/bin/python ] && python3 -m venv --without-pip .venv \
    && python3 -m pip --python .venv/bin/python --version >/dev/null 2>&1; then
    # The demo's venv: the host's pip installs into it, which spares ensurepip's copy of pip
    # (a full set-up adds one).
    python3 -m pip --python .venv/bin/python install --quiet -e .
  elif [ "$lean" = 1 ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip --upgrade >/dev/null
    .venv/bin/python -m pip install --quiet -e .
  else
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip --upgrade >/dev/null
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
  fi
  echo "$wanted" >"$stamp"
}
npm_into() { # npm_into PREFIX PACKAGE...: install into a prefix of its own
  local prefix=$1
  shift
  mkdir -p "$prefix"
  # --prefer-offline: what npm's cache holds is not asked of the registry again (the top-level
  # versions are pinned); what it lacks is fetched.
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --prefer-offline "$@"
}
python_side &
jobs+=($!)
if [ ! -x .tools/node_modules/.bin/pi ] || [ ! -x .tools/node_modules/.bin/node ]; then
  npm_into .tools "$NODE_PACKAGE" "$PI_PACKAGE" &
  jobs+=($!)
fi
if [ "$lean" = 0 ]; then
  if [ ! -x .tools-claude/node_modules/.bin/claude ]; then
    npm_into .tools-claude "$CLAUDE_PACKAGE" &
    jobs+=($!)
  fi
  if [ ! -x .tools-agents/node_modules/.bin/codex ] || [ ! -x .tools-agents/node_modules/.bin/opencode ] \
    || [ ! -x .tools-agents/node_modules/.bin/gemini ]; then
    npm_into .tools-agents "$CODEX_PACKAGE" "$OPENCODE_PACKAGE" "$GEMINI_PACKAGE" &
    jobs+=($!)
  fi
  if [ ! -x .tools-acp/node_modules/.bin/pi-acp ] || [ ! -x .tools-acp/node_modules/.bin/claude-agent-acp ]; then
    npm_into .tools-acp "$PI_ACP_PACKAGE" "$CLAUDE_ACP_PACKAGE" &
    jobs+=($!)
  fi
fi
failed=0
for job in "${jobs[@]}"; do
  wait "$job" || failed=1
done
[ "$failed" = 0 ] || { echo "setup: an install failed (its output is above)" >&2; exit 1; }
if [ "$lean" = 1 ]; then
  # pi's version from its package (the demo starts pi next: no need to start it twice)
  pi_version="$(.tools/node_modules/.bin/node -p 'require("./.tools/node_modules/@earendil-works/pi-coding-agent/package.json").version' 2>/dev/null || echo '?')"
  echo "setup: python $(.venv/bin/python --version 2>&1 | cut -d' ' -f2), node $(.tools/node_modules/.bin/node --version), pi $pi_version"
  exit 0
fi
# bubblewrap: the sandbox of the agents' commands (optional; the README says how per distribution).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
  else
    echo "setup: bubblewrap is missing: runs cannot ask for a sandbox (README: Install, the sandbox)"
  fi
fi
echo "setup: claude $(.tools-claude/node_modules/.bin/claude --version 2>&1 | tail -1)"
echo "setup: codex $(.tools-agents/node_modules/.bin/codex --version 2>&1 | tail -1), opencode $(HOME="$(mktemp -d)" .tools-agents/node_modules/.bin/opencode --version 2>&1 | tail -1), gemini $(HOME="$(mktemp -d)" .tools-agents/node_modules/.bin/gemini --version 2>&1 | tail -1)"
echo "setup: ACP agents $PI_ACP_PACKAGE $CLAUDE_ACP_PACKAGE in .tools-acp"
echo "setup: python $(.venv/bin/python --version 2>&1 | cut -d' ' -f2), node $(.tools/node_modules/.bin/node --version), pi $(PATH="$PWD/.tools/node_modules/.bin:$PATH" PI_CODING_AGENT_DIR="$(mktemp -d)" pi --version 2>&1 | tail -1)"
