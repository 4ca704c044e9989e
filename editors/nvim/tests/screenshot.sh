#!/usr/bin/env bash
# The README's screenshot of the chat: a real Neovim in tmux (120x36) drives two turns against the
# bridge's scripted model (tests/screenshot.lua); the screen is captured with its colours
# (artifacts/nvim/chat.ansi) and rendered to artifacts/nvim/chat.png when Pillow is available
# ($SHOT_PYTHON, default: PI_BRIDGE_PYTHON). Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tmux_nvim.sh" pi-bridge-shot screenshot.lua
out="$repo/artifacts/nvim"
mkdir -p "$out"
for _ in $(seq 1 600); do
  [[ -e "$work/ready" ]] && break
  sleep 0.2
done
[[ -e "$work/ready" ]] || { echo "the chat did not get ready" >&2; tmux capture-pane -p -t "$session" >&2; exit 1; }
capture() {
  tmux capture-pane -e -p -t "$session" >"$out/$1.ansi"
  tmux capture-pane -p -t "$session" >"$out/$1.txt"
}
capture chat
touch "$work/ready.next"
for _ in $(seq 1 150); do
  [[ -e "$work/ready.diff" ]] && break
  sleep 0.2
done
[[ -e "$work/ready.diff" ]] || { echo "the diff did not open" >&2; exit 1; }
capture diff
touch "$work/ready.next2"
for _ in $(seq 1 150); do
  [[ -e "$work/ready.approval" ]] && tmux capture-pane -p -t "$session" | grep -q 'Type number' && break
  sleep 0.2
done
tmux capture-pane -p -t "$session" | grep -q 'Type number' || { echo "no approval prompt" >&2; exit 1; }
capture approval
tmux send-keys -t "$session" 1 Enter
shot_python="${SHOT_PYTHON:-$python}"
for name in chat diff approval; do
  if "$shot_python" -c 'import PIL' 2>/dev/null; then
    "$shot_python" "$here/tests/ansi_to_png.py" "$out/$name.ansi" "$out/$name.png"
    echo "wrote $out/$name.png"
  else
    echo "no Pillow for $shot_python: wrote only $out/$name.ansi and $name.txt"
  fi
done
