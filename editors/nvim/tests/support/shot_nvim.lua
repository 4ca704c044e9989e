-- The Neovim of the screenshots (tests/screenshot.lua, tests/surfaces.lua): the plugin on the
-- scripted model, colours, a statusline with pi_bridge.status(), no line numbers, in the scratch
-- project. Env: PI_BRIDGE_PYTHON, PI_BRIDGE_SHOT_ROOT (repo), PI_BRIDGE_SHOT_PROJECT.
--- @param opts { statusline: string, setup: table? } setup's options beyond the scripted bridge
--- @return string root, string project
return function(opts)
  local root = assert(os.getenv('PI_BRIDGE_SHOT_ROOT'))
  local project = assert(os.getenv('PI_BRIDGE_SHOT_PROJECT'))
  vim.opt.rtp:prepend(root .. '/editors/nvim')
  vim.cmd.runtime('plugin/pi_bridge.lua')
  vim.o.termguicolors = true
  vim.o.laststatus = 2
  vim.o.statusline = opts.statusline
  vim.o.showtabline = 0
  vim.o.number = false
  vim.o.fillchars = 'eob: '
  require('pi_bridge').setup(vim.tbl_extend('force', {
    cmd = { assert(os.getenv('PI_BRIDGE_PYTHON')), '-m', 'bridge', '--scripted-model' },
    cmd_cwd = root,
    log_file = false,
  }, opts.setup or {}))
  vim.cmd('cd ' .. vim.fn.fnameescape(project))
  return root, project
end
