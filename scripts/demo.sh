#!/usr/bin/env bash
# The main job end to end, offline: set up, then run one prompt through the bridge and the real pi
# against the built-in scripted model, printing the normalized message stream.
#   bash scripts/demo.sh ["prompt"] [--model text|thinking|tool|unicode|err500|...]
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo needs the bridge, Node and pi only. Set-up's own chatter goes to a log; its last line
# (the versions) is shown, and the whole log only when set-up fails.
log=$(mktemp "${TMPDIR:-/tmp}/pi-bridge-setup.XXXXXX")
if ! bash scripts/setup.sh --lean >"$log" 2>&1; then
  cat "$log" >&2
  echo "demo: set-up failed (log above)" >&2
  exit 1
fi
tail -n 1 "$log" >&2
rm -f "$log"
export PATH="$PWD/.tools/node_modules/.bin:$PATH"
exec .venv/bin/pi-bridge demo "$@"
