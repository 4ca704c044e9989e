#!/usr/bin/env bash
# The main job end to end, offline: set up, then run one prompt through the bridge and the real pi
# against the built-in scripted model, printing the normalized message stream.
#   bash scripts/demo.sh ["prompt"] [--model text|thinking|tool|unicode|err500|...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
export PATH="$PWD/.tools/node_modules/.bin:$PATH"
exec .venv/bin/pi-bridge demo "$@"
