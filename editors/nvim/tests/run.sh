#!/usr/bin/env bash
# Run the Neovim plugin's headless tests with XDG dirs in a temp dir.
# Env: NVIM (the nvim binary; default: nvim beside PI_BRIDGE_PYTHON, then PATH), PI_BRIDGE_PYTHON.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
nvim="${NVIM:-}"
if [[ -z "$nvim" ]]; then
  if [[ -x "$(dirname "$python")/nvim" ]]; then nvim="$(dirname "$python")/nvim"; else nvim="$(command -v nvim || true)"; fi
fi
[[ -n "$nvim" ]] || { echo "nvim not found: set NVIM or run editors/nvim/ci.sh" >&2; exit 1; }
xdg="$(mktemp -d)"
trap 'rm -rf "$xdg"' EXIT
export XDG_CONFIG_HOME="$xdg/config" XDG_DATA_HOME="$xdg/data" XDG_STATE_HOME="$xdg/state" \
  XDG_CACHE_HOME="$xdg/cache" XDG_RUNTIME_DIR="$xdg/run" PI_BRIDGE_PYTHON="$python"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
cd "$repo"
exec "$nvim" --headless -u NONE -i NONE --cmd "set rtp^=$here" -l "$here/tests/run.lua" </dev/null
