-- Drives a real (tmux) Neovim for the screenshots of the editor's surfaces (issue 38), each from a
-- live agent on the bridge's scripted model: a file on the left, the chat on the right. The real
-- Claude Code makes a plan (TaskCreate, TaskUpdate) and a subagent (Task); then real pi edits a
-- file whose buffer holds unsaved typing, through workspace/applyEdit. Writes
-- $PI_BRIDGE_SHOT_READY.<stage> when each picture is ready, waits for <stage>.taken before the
-- next, and $PI_BRIDGE_SHOT_READY.failed (with the reason) when a stage cannot be reached.
-- Env: PI_BRIDGE_PYTHON, PI_BRIDGE_SHOT_ROOT (repo), PI_BRIDGE_SHOT_PROJECT (a scratch project dir).
local root = assert(os.getenv('PI_BRIDGE_SHOT_ROOT'))
local python = assert(os.getenv('PI_BRIDGE_PYTHON'))
local claude_bin = root .. '/.tools-claude/node_modules/.bin'
local _, project = dofile(root .. '/editors/nvim/tests/support/shot_nvim.lua')({
  statusline = '%f %m %= %{v:lua.require\'pi_bridge\'.status()} ',
  setup = {
    cmd = { python, '-m', 'bridge', '--agent', 'claude', '--scripted-model' },
    cmd_env = { PATH = claude_bin .. ':' .. vim.env.PATH },
    model = 'script',
  },
})
local ready = assert(os.getenv('PI_BRIDGE_SHOT_READY'))
local view = require('pi_bridge.ui.chat_view')
local chat = require('pi_bridge.ui.chat')
local client = require('pi_bridge.core.client')
dofile(root .. '/editors/nvim/tests/support/approve_all.lua') -- the user allows each tool call

local function failed(why)
  vim.fn.writefile({ why }, ready .. '.failed')
  vim.cmd('qa!')
end

local function stage(name)
  vim.cmd('redraw!')
  vim.fn.writefile({ 'ready' }, ready .. '.' .. name)
  vim.wait(60000, function()
    return vim.fn.filereadable(ready .. '.' .. name .. '.taken') == 1
  end, 50)
end

--- Send `calls` (the `script` scenario's list) in the chat; the run once it ended.
local function turn(calls)
  chat.send(vim.json.encode(calls))
  local run = chat.state().run
  if not vim.wait(120000, function()
    return run.done
  end, 50) or run.status ~= 'completed' then
    failed('the run did not complete: ' .. vim.inspect(run.status) .. ' ' .. vim.inspect(run.error))
  end
end

vim.fn.writefile({ 'def parse(a, b):', '    return a / b', '' }, project .. '/parser.py')
vim.cmd('edit parser.py')
vim.cmd('PiChat')
local calls = {}
for _, subject in ipairs({ 'Read the parser', 'Guard the division by zero', 'Add a test' }) do
  calls[#calls + 1] = { 'TaskCreate', { subject = subject, description = subject, activeForm = subject } }
end
calls[#calls + 1] = { 'TaskUpdate', { taskId = '1', status = 'in_progress' } }
local inner = vim.json.encode({ { 'Read', { file_path = project .. '/parser.py' } } })
calls[#calls + 1] = { 'Task', { description = 'Find every division', prompt = inner, subagent_type = 'general-purpose' } }
calls[#calls + 1] = { 'TaskUpdate', { taskId = '1', status = 'completed' } }
calls[#calls + 1] = { 'TaskUpdate', { taskId = '2', status = 'in_progress' } }
turn(calls)
local thread_win = view.thread_win()
vim.api.nvim_win_call(thread_win, function()
  vim.cmd('normal! zM')
  for i, l in ipairs(vim.api.nvim_buf_get_lines(view.thread(), 0, -1, true)) do
    if vim.startswith(l, '▤ plan') then
      vim.api.nvim_win_set_cursor(thread_win, { math.max(1, i - 3), 0 })
      vim.cmd('normal! zt')
    end
  end
end)
stage('plan') -- the plan, and the subagent folded under its Task line
vim.api.nvim_set_current_win(thread_win)
for i, l in ipairs(vim.api.nvim_buf_get_lines(view.thread(), 0, -1, true)) do
  if l:find(': Find every division', 1, true) then
    vim.api.nvim_win_set_cursor(thread_win, { i, 0 })
  end
end
vim.cmd('normal! zo')
stage('subagent') -- the fold opened: the subagent's calls

-- pi now: the user types in parser.py and does not save; pi's edit comes as workspace/applyEdit.
client.stop(true)
vim.wait(15000, function()
  return #vim.lsp.get_clients({ name = 'pi_bridge' }) == 0
end, 50)
require('pi_bridge').setup({ cmd = { python, '-m', 'bridge', '--scripted-model' }, cmd_cwd = root, log_file = false, model = 'script' })
chat.new()
client.with_client(function() end) -- started, the client attaches the open file buffers
local file_win = vim.fn.win_findbuf(vim.fn.bufnr(project .. '/parser.py'))[1]
vim.api.nvim_set_current_win(file_win)
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 2, 3, true, { '# TODO: a docstring (typed, not saved)' })
local attached = vim.wait(30000, function()
  local c = vim.lsp.get_clients({ name = 'pi_bridge' })[1]
  return c ~= nil and vim.lsp.buf_is_attached(buf, c.id)
end, 50)
if not attached then
  failed('parser.py was not attached to the bridge')
end
local guard = '    if b == 0:\n        raise ZeroDivisionError("b is 0")\n    return a / b'
turn({ { 'edit', { path = 'parser.py', edits = { { oldText = '    return a / b', newText = guard } } } } })
if vim.fn.readfile(project .. '/parser.py')[2] ~= '    return a / b' or not vim.bo[buf].modified then
  failed('the edit went behind the buffer')
end
vim.api.nvim_set_current_win(file_win)
stage('dirty')
vim.cmd('qa!')
