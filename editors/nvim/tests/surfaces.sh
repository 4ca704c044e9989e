#!/usr/bin/env bash
# Screenshots of the editor's surfaces (issue 38) in a real Neovim in tmux (120x36): the plan in
# the chat, a subagent folded under its parent, an agent's edit applied to a dirty buffer
# (tests/surfaces.lua). Writes docs/images/nvim-{plan,subagent,dirty-edit}.png (Pillow needed).
# Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
nvim="${NVIM:-$here/.cache/venv/bin/nvim}"
out="$repo/docs/images"
work="$(mktemp -d)"
session="pi-bridge-surfaces-$$"
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/project" "$work/xdg/config" "$work/xdg/data" "$work/xdg/state" "$work/xdg/run"
chmod 700 "$work/xdg/run"
tmux new-session -d -s "$session" -x 120 -y 36 -e TERM=xterm-256color -e COLORTERM=truecolor \
  -e PATH="$repo/.tools/node_modules/.bin:$PATH" -e PI_BRIDGE_PYTHON="$python" \
  -e PI_BRIDGE_SHOT_ROOT="$repo" -e PI_BRIDGE_SHOT_PROJECT="$work/project" \
  -e PI_BRIDGE_SHOT_READY="$work/ready" -e XDG_CONFIG_HOME="$work/xdg/config" \
  -e XDG_DATA_HOME="$work/xdg/data" -e XDG_STATE_HOME="$work/xdg/state" \
  -e XDG_RUNTIME_DIR="$work/xdg/run" \
  "$nvim -u NONE -i NONE --cmd 'set rtp^=$here' -c 'luafile $here/tests/surfaces.lua'"
for pair in plan:nvim-plan subagent:nvim-subagent dirty:nvim-dirty-edit; do
  stage="${pair%%:*}" name="${pair#*:}"
  for _ in $(seq 1 300); do
    [[ -e "$work/ready.$stage" ]] && break
    sleep 0.2
  done
  [[ -e "$work/ready.$stage" ]] || { echo "stage $stage not reached" >&2; tmux capture-pane -p -t "$session" >&2; exit 1; }
  tmux capture-pane -e -p -t "$session" >"$work/$name.ansi"
  "$python" "$here/tests/ansi_to_png.py" "$work/$name.ansi" "$out/$name.png"
  echo "wrote $out/$name.png"
  touch "$work/ready.$stage.taken"
done
