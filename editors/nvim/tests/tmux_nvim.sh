# Sourced by tests/screenshot.sh and tests/surfaces.sh: start a real Neovim (120x36) in tmux that
# runs tests/$2 against the bridge's scripted model, in a scratch project and XDG dirs. $1 names
# the tmux session. Sets here, repo, python and work ($PI_BRIDGE_SHOT_READY is $work/ready); the
# session and $work go on exit. Env: NVIM, PI_BRIDGE_PYTHON, Node 22 + pi on PATH.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
nvim="${NVIM:-$here/.cache/venv/bin/nvim}"
work="$(mktemp -d)"
session="$1-$$"
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
  "$nvim -u NONE -i NONE --cmd 'set rtp^=$here' -c 'luafile $here/tests/$2'"
