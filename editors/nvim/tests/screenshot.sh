#!/usr/bin/env bash
# The README's screenshot of the chat: a real Neovim in tmux (120x36) drives two turns against the
# bridge's scripted model (tests/screenshot.lua); the screen is captured with its colours
# (artifacts/nvim/chat.ansi) and rendered to artifacts/nvim/chat.png when Pillow is available
# ($SHOT_PYTHON, default: PI_BRIDGE_PYTHON). Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
nvim="${NVIM:-$here/.cache/venv/bin/nvim}"
out="$repo/artifacts/nvim"
mkdir -p "$out"
work="$(mktemp -d)"
session="pi-bridge-shot-$$"
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
  "$nvim -u NONE -i NONE --cmd 'set rtp^=$here' -c 'luafile $here/tests/screenshot.lua'"
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
