#!/usr/bin/env bash
# Screenshots of the editor's surfaces (issue 38) in a real Neovim in tmux (120x36), from live
# agents on the scripted model: Claude Code's plan in the chat, its subagent folded under its Task
# line, pi's edit applied to a dirty buffer (tests/surfaces.lua). Writes
# docs/images/nvim-{plan,subagent,dirty-edit}.png (Pillow needed); fails when a stage is not reached.
# Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH, Claude Code in .tools-claude.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tmux_nvim.sh" pi-bridge-surfaces surfaces.lua
out="$repo/docs/images"
for pair in plan:nvim-plan subagent:nvim-subagent dirty:nvim-dirty-edit; do
  stage="${pair%%:*}" name="${pair#*:}"
  for _ in $(seq 1 900); do
    [[ -e "$work/ready.$stage" || -e "$work/ready.failed" ]] && break
    sleep 0.2
  done
  [[ -e "$work/ready.$stage" ]] || { echo "stage $stage not reached: $(cat "$work/ready.failed" 2>/dev/null)" >&2; tmux capture-pane -p -t "$session" >&2; exit 1; }
  tmux capture-pane -e -p -t "$session" >"$work/$name.ansi"
  "$python" "$here/tests/ansi_to_png.py" "$work/$name.ansi" "$out/$name.png"
  echo "wrote $out/$name.png"
  touch "$work/ready.$stage.taken"
done
