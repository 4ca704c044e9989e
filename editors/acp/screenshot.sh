#!/usr/bin/env bash
# docs/acp.md's picture of an approval in a real ACP client: acpx (installed by ci.sh) in tmux runs
# one prompt against `pi-bridge --scripted-model acp`, asks "Allow write ...? (y/N)", gets "y",
# and the screen is captured with its colours (artifacts/acp/acpx-approval.ansi, rendered to .png
# when Pillow is there). Not a test: ci.sh's acpx test checks the flow.
# Env: PI_BRIDGE_PYTHON (a venv whose bin holds pi-bridge), Node 22 + pi on PATH, tmux.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
out="$repo/artifacts/acp"
mkdir -p "$out"
demo="$(mktemp -d -t demo.XXXX)"  # under $TMPDIR: the picture shows a short path
session="pi-bridge-acpx-shot-$$"
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$demo"; }
trap cleanup EXIT
mkdir -p "$demo/project" "$demo/.home" "$demo/.state"
tmux new-session -d -s "$session" -x 100 -y 26 "cd '$demo/project' && env TERM=xterm-256color \
  HOME='$demo/.home' PI_BRIDGE_STATE_DIR='$demo/.state' PATH='$(dirname "$python"):$PATH' \
  '$here/node_modules/.bin/acpx' --agent 'pi-bridge --scripted-model acp' --cwd '$demo/project' \
  --model fake/write exec 'Create created/new.txt with two lines.'; sleep 600"
wait_for() { # wait_for TEXT: until the screen shows TEXT (bounded)
  for _ in $(seq 1 300); do
    tmux capture-pane -p -t "$session" | grep -qF "$1" && return 0
    sleep 0.2
  done
  echo "the screen never showed: $1" >&2
  tmux capture-pane -p -t "$session" >&2
  return 1
}
wait_for "(y/N)"
tmux send-keys -t "$session" y Enter
wait_for "[done]"
tmux capture-pane -e -p -t "$session" >"$out/acpx-approval.ansi"
if "$python" -c 'import PIL' 2>/dev/null; then
  "$python" "$repo/editors/nvim/tests/ansi_to_png.py" "$out/acpx-approval.ansi" "$out/acpx-approval.png"
  echo "wrote $out/acpx-approval.png"
fi
