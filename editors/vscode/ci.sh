#!/usr/bin/env bash
# CI of the VS Code extension, from a clean state: installs what it needs (Debian packages,
# npm packages from the committed lock, code-server in a git-ignored cache), type-checks, builds and
# packages the .vsix, then runs the unit tests, the tests against the real bridge, the chat's webview
# in headless Chromium, and the end-to-end test in a real VS Code (code-server + headless Chromium).
# Exits non-zero on any failure.
#   bash ci.sh [all|build|test|unit|e2e]: `build` installs, checks and packages (no test runs: it
#   can run beside other work), `test` runs the tests of an earlier `build`: `unit` its unit, bridge
#   and webview tests, `e2e` its end-to-end test in code-server (the two can run side by side);
#   `all` (the default) does both.
#
# Env: PI_BRIDGE_PYTHON (the Python that runs the bridge; default: the repo's .venv), PATH with
# Node >= 22 and pi first (else the repo's .tools is used). code-server runs on Node 20, picked
# explicitly: CODE_SERVER_NODE, else /usr/bin/node when it is v20, else node@20 from npm (cached).
set -euo pipefail
phase="${1:-all}"
case "$phase" in all | build | test | unit | e2e) ;; *) echo "usage: ci.sh [all|build|test|unit|e2e]" >&2; exit 2 ;; esac
building=0 testing=0 unit=1 e2e=1
case "$phase" in all | build) building=1 ;; esac
[ "$phase" = build ] || testing=1
[ "$phase" != e2e ] || unit=0
[ "$phase" != unit ] || e2e=0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
started=$(date +%s)
CODE_SERVER_VERSION=4.100.3
cache="$here/.cache"
cs_prefix="$cache/code-server-$CODE_SERVER_VERSION"
cs_dir="$cs_prefix/node_modules/code-server"

step() { echo "== vscode: $* ($(( $(date +%s) - started )) s)"; }
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

step "Debian packages"
apt_wanted=(chromium ripgrep g++ make bubblewrap)
apt_missing=()
for pkg in "${apt_wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || apt_missing+=("$pkg")
done
if [ "${#apt_missing[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

step "Node for the build and tests (>= 22)"
if [ "$(node_major "$(command -v node || echo node)")" -lt 22 ]; then
  export PATH="$repo/.tools/node_modules/.bin:$PATH"
fi
[ "$(node_major node)" -ge 22 ] || { echo "need Node >= 22 on PATH (or in $repo/.tools)" >&2; exit 1; }
echo "node $(node --version), npm $(npm --version)"

step "Node 20 for code-server"
node20="${CODE_SERVER_NODE:-}"
if [ -z "$node20" ]; then
  if [ "$(node_major /usr/bin/node)" = 20 ]; then
    node20=/usr/bin/node
  else
    [ -x "$cache/node20/node_modules/.bin/node" ] ||
      npm install --prefix "$cache/node20" --no-audit --no-fund --silent node@20
    node20="$cache/node20/node_modules/.bin/node"
  fi
fi
[ "$(node_major "$node20")" = 20 ] || { echo "code-server needs Node 20; $node20 is not" >&2; exit 1; }
export CODE_SERVER_NODE="$node20"
echo "code-server node: $node20 $("$node20" --version)"

if [ "$building" = 1 ]; then
  step "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi

step "code-server $CODE_SERVER_VERSION"
if [ ! -f "$cs_prefix/.ready" ]; then
  rm -rf "$cs_prefix"
  mkdir -p "$cs_prefix"
  echo '{"private": true}' >"$cs_prefix/package.json"
  node20_path="$(dirname "$node20"):$PATH"
  # Scripts would download ripgrep and run code-server's own postinstall; do their work by hand.
  (cd "$cs_prefix" && PATH="$node20_path" npm install --omit=dev --ignore-scripts --no-audit --no-fund \
    --loglevel=error "code-server@$CODE_SERVER_VERSION")
  (cd "$cs_prefix" && PATH="$node20_path" npm rebuild argon2 --loglevel=error)
  (cd "$cs_dir/lib/vscode" && PATH="$node20_path" npm install --omit=dev --ignore-scripts --no-audit \
    --no-fund --loglevel=error && PATH="$node20_path" npm rebuild @vscode/spdlog --loglevel=error)
  ln -sfn node_modules "$cs_dir/lib/vscode/node_modules.asar"
  mkdir -p "$cs_dir/lib/vscode/node_modules/@vscode/ripgrep/bin"
  ln -sfn "$(command -v rg)" "$cs_dir/lib/vscode/node_modules/@vscode/ripgrep/bin/rg"
  find "$cs_dir/lib/vscode/node_modules/@vscode/spdlog/build/Release" -name spdlog.node | grep -q . ||
    { echo "spdlog did not build" >&2; exit 1; }
  touch "$cs_prefix/.ready"
fi
# The terminal (the Install pi notification opens one) needs node-pty's native module; its
# post-install step fails without network (node-gyp via npx) after the module itself is built.
pty="$cs_dir/lib/vscode/node_modules/node-pty"
if [ ! -f "$pty/build/Release/pty.node" ]; then
  (cd "$pty" && PATH="$(dirname "$node20"):$PATH" npm rebuild --loglevel=silent >/dev/null 2>&1) || true
  [ -f "$pty/build/Release/pty.node" ] || { echo "node-pty did not build" >&2; exit 1; }
fi
export CODE_SERVER_DIR="$cs_dir"

export PI_BRIDGE_PYTHON="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
if [ "$building" = 1 ]; then
  # One type check of the extension and its tests, which also emits the tests' JavaScript
  # (tsconfig.test.json's files are a subset of tsconfig.json's): the project is checked once.
  step "typecheck, and compile the tests (tsc)"
  npm run --silent generate
  npx tsc -p . --noEmit false
  npx tsc --noEmit -p src/chat/webview

  step "lint (eslint, typescript-eslint)"
  npx eslint --max-warnings 0 .

  step "package the platform .vsix (linux-x64, the bridge and its Python libraries bundled)"
  npm run --silent package
  ls -l dist/pi-bridge-linux-x64.vsix

fi
if [ "$testing" = 0 ]; then
  step "built"
  exit 0
fi

if [ "$unit" = 1 ]; then
  step "unit tests, tests against the real bridge with real pi and with the fake pi, the chat's webview in Chromium (node --test)"
  node --test --test-reporter=spec out/test/unit.test.js out/test/install.test.js out/test/bridge.test.js out/test/fake-pi.test.js out/test/checkpoints.test.js \
    out/test/webview.test.mjs
fi

if [ "$e2e" = 1 ]; then
  step "end to end in code-server $CODE_SERVER_VERSION + headless Chromium"
  export PI_BRIDGE_VSIX="$here/dist/pi-bridge-linux-x64.vsix"
  node --test --test-reporter=spec out/test/e2e/vscode.e2e.test.mjs
  echo "screenshots: $repo/artifacts/vscode/"
fi

step "done"
