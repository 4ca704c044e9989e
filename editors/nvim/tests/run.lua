-- Headless tests of the pi-bridge Neovim plugin against the real bridge, its scripted model and pi.
--
--   nvim --headless -u NONE -i NONE --cmd 'set rtp^=editors/nvim' -l editors/nvim/tests/run.lua
--
-- Env: PI_BRIDGE_PYTHON (python able to run `-m bridge`, default <repo>/.venv/bin/python),
-- PATH with Node 22 and pi first (<repo>/.tools/node_modules/.bin is prepended when present),
-- PI_BRIDGE_TEST_FILTER (Lua patterns separated by `;`: run only matching tests), PI_BRIDGE_TEST_SHOW_LOG (print the
-- bridge's log even when all pass). Prints `N passed, M failed`; exit code 1 on any failure.
local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local h = dofile(here .. '/support/helpers.lua')
-- One Neovim, one bridge: the files run in this order, each test after the one before it.
for _, feature in ipairs({
  'basics', 'approvals', 'runs', 'chat', 'rewind', 'words', 'agent_views', 'agent_picker', 'lifecycle',
  'build',
}) do
  dofile(here .. '/features/' .. feature .. '.lua')(h)
end
h.run()
