-- The processes of this machine as /proc shows them, for the tests that check what a run leaves
-- running (tests/support/helpers.lua and the child Neovim of quit_child.lua).
local M = {}

--- /proc: state, ppid and start time of a process; nil once it is gone.
function M.stat(pid)
  local f = io.open('/proc/' .. pid .. '/stat')
  if not f then
    return nil
  end
  local s = f:read('*a') -- nil when the process ended between the open and the read
  f:close()
  local rest = s and s:match('^.*%) (.*)$')
  if not rest then
    return nil
  end
  local fields = vim.split(rest, ' ', { plain = true })
  return { state = fields[1], ppid = tonumber(fields[2]), start = fields[20] }
end

--- The command line of a process ("" once it is gone).
function M.cmdline(pid)
  local f = io.open('/proc/' .. pid .. '/cmdline')
  if not f then
    return ''
  end
  local raw = f:read('*a') -- nil when the process ended between the open and the read
  f:close()
  if not raw then
    return ''
  end
  return vim.trim((raw:gsub('%z', ' ')))
end

--- Every process: its stat by pid.
function M.all_stats()
  local out = {}
  for name in vim.fs.dir('/proc') do
    if name:match('^%d+$') then
      local st = M.stat(name)
      if st then
        out[tonumber(name)] = st
      end
    end
  end
  return out
end

--- The pids of every process under `pid`.
function M.descendants(pid)
  local stats = M.all_stats()
  local out, frontier = {}, { pid }
  while #frontier > 0 do
    local next_ = {}
    for p, st in pairs(stats) do
      if vim.tbl_contains(frontier, st.ppid) then
        out[#out + 1] = p
        next_[#next_ + 1] = p
      end
    end
    frontier = next_
  end
  return out
end

--- Whether `pid` is still the process that started at `start`, and not a zombie.
function M.alive(pid, start)
  local st = M.stat(pid)
  return st ~= nil and st.start == start and st.state ~= 'Z' and st.state ~= 'X'
end

return M
