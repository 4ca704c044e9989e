-- Child of run.lua's quit test: start a `toolslow` run, print its process tree, then :qall! mid-run.
-- Args (env): PI_BRIDGE_PYTHON, QUIT_CHILD_ROOT (repo), QUIT_CHILD_PATH (PATH of the bridge).
local root = os.getenv('QUIT_CHILD_ROOT')
vim.opt.rtp:prepend(root .. '/editors/nvim')
local pi_bridge = require('pi_bridge')
pi_bridge.setup({
  cmd = { os.getenv('PI_BRIDGE_PYTHON'), '-m', 'bridge', '--scripted-model' },
  cmd_cwd = root,
  cmd_env = { PATH = os.getenv('QUIT_CHILD_PATH') },
  log_file = false,
  view = 'none',
})
dofile(root .. '/editors/nvim/tests/support/approve_all.lua') -- the user allows each tool call
local run = require('pi_bridge.core.handlers').get(pi_bridge.run('slow tool', { model = 'toolslow' }))

local procs = dofile(root .. '/editors/nvim/tests/support/procs.lua')

--- Every process under this Neovim, with its start time (pid reuse).
local function tree()
  return vim.tbl_map(function(pid)
    return { pid = pid, start = (procs.stat(pid) or {}).start }
  end, procs.descendants(vim.fn.getpid()))
end

local function has_sleep()
  return vim.iter(procs.descendants(vim.fn.getpid())):any(function(pid)
    return procs.cmdline(pid):match('^%S*sleep 30') ~= nil
  end)
end

local ok = vim.wait(60000, function()
  return has_sleep() or run.done
end, 20)
io.stdout:write(vim.json.encode({ ok = ok and not run.done, tree = tree() }), '\n')
io.stdout:flush()
vim.cmd('qall!')
