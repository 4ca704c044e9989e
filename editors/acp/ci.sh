#!/usr/bin/env bash
# CI hook of the ACP front: `pi-bridge acp` end to end through the official ACP TypeScript SDK
# client (editors/acp/test/), against the real pi and the scripted model.
# Env: PI_BRIDGE_PYTHON (venv python able to run `-m bridge`), PATH with Node 22 and pi first.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export PI_BRIDGE_PYTHON="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
# This checkout's bridge, whatever checkout the venv's editable install points at.
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
# acpx is not in the lock: a lock made here lacks the other platforms' builds of one of its
# dependencies (the registry reached here has none of them), and `npm ci` refuses such a lock.
npm install --no-save --no-audit --no-fund --loglevel=error acpx@0.19.1
timeout 600 node --test test/acp.test.mjs
