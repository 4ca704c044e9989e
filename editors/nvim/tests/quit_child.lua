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
dofile(root .. '/editors/nvim/tests/approve_all.lua') -- the user allows each tool call
local run = require('pi_bridge.core.handlers').get(pi_bridge.run('slow tool', { model = 'toolslow' }))

local function children(pid)
  local out = {}
  for name in vim.fs.dir('/proc') do
    local f = name:match('^%d+$') and io.open('/proc/' .. name .. '/stat')
    if f then
      local text = f:read('*a') -- nil when the process ended between the open and the read
      f:close()
      local rest = text and text:match('^.*%) (.*)$')
      local fields = rest and vim.split(rest, ' ', { plain = true }) or {}
      if tonumber(fields[2]) == pid then
        out[#out + 1] = { pid = tonumber(name), start = fields[20] }
      end
    end
  end
  return out
end

local function tree()
  local out, frontier = {}, { vim.fn.getpid() }
  while #frontier > 0 do
    local next_ = {}
    for _, p in ipairs(frontier) do
      for _, c in ipairs(children(p)) do
        out[#out + 1] = c
        next_[#next_ + 1] = c.pid
      end
    end
    frontier = next_
  end
  return out
end

local function has_sleep()
  for _, p in ipairs(tree()) do
    local f = io.open('/proc/' .. p.pid .. '/cmdline')
    local cmd = f and f:read('*a'):gsub('%z', ' ') or ''
    if f then
      f:close()
    end
    if cmd:match('^%S*sleep 30') then
      return true
    end
  end
end

local ok = vim.wait(60000, function()
  return has_sleep() or run.done
end, 20)
io.stdout:write(vim.json.encode({ ok = ok and not run.done, tree = tree() }), '\n')
io.stdout:flush()
vim.cmd('qall!')
