#!/usr/bin/env bash
# CI hook of the Vim 9 client test: install Vim (>= 9, +channel) if needed, run editors/vim/test.vim.
# Env: PI_BRIDGE_PYTHON (python able to run `-m bridge`), PATH with Node 22 and pi first.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

vim_ok() {
  command -v vim >/dev/null 2>&1 || return 1
  local v
  v="$(vim --version 2>/dev/null)" || return 1
  grep -q '+channel' <<<"$v" || return 1
  [[ "$(sed -n 's/^VIM - Vi IMproved \([0-9]*\)\..*/\1/p' <<<"$v" | head -1)" -ge 9 ]]
}
if ! vim_ok; then
  echo "installing vim-nox (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq vim-nox >/dev/null
fi
vim_ok || { echo "vim >= 9 with +channel is not available" >&2; exit 1; }
vim --version | head -1

cd "$repo"
timeout 300 vim -Nu NONE -i NONE -es -S "$here/test.vim" </dev/null
