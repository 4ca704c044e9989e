#!/usr/bin/env bash
# Screenshots of the editor's surfaces (issue 38) in a real Neovim in tmux (120x36): the plan in
# the chat, a subagent folded under its parent, an agent's edit applied to a dirty buffer
# (tests/surfaces.lua). Writes docs/images/nvim-{plan,subagent,dirty-edit}.png (Pillow needed).
# Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tmux_nvim.sh" pi-bridge-surfaces surfaces.lua
out="$repo/docs/images"
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
