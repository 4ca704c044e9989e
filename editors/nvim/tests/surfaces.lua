-- Drives a real (tmux) Neovim for the screenshots of the editor's surfaces (issue 38): a file on
-- the left, the chat on the right. The plan and the subagent are the contract messages the bridge
-- sends for Claude Code's TodoWrite and Task (bridge/agents/claude/mapper.py), replayed into the
-- chat; the dirty-file edit goes through the running bridge client's own `workspace/applyEdit`
-- handler. Writes $PI_BRIDGE_SHOT_READY.<stage> when each picture is ready and waits for
-- $PI_BRIDGE_SHOT_READY.<stage>.taken before the next one.
-- Env: PI_BRIDGE_PYTHON, PI_BRIDGE_SHOT_ROOT (repo), PI_BRIDGE_SHOT_PROJECT (a scratch project dir).
local _, project = dofile(
  assert(os.getenv('PI_BRIDGE_SHOT_ROOT')) .. '/editors/nvim/tests/support/shot_nvim.lua'
)({ statusline = '%f %m %= %{v:lua.require\'pi_bridge\'.status()} ' })
local ready = assert(os.getenv('PI_BRIDGE_SHOT_READY'))
vim.fn.writefile({ 'def parse(a, b):', '    return a / b', '' }, project .. '/parser.py')
vim.cmd('edit parser.py')
vim.cmd('PiChat')
local view = require('pi_bridge.ui.chat_view')
local render = require('pi_bridge.ui.render')

local function stage(name)
  vim.cmd('redraw!')
  vim.fn.writefile({ 'ready' }, ready .. '.' .. name)
  vim.wait(60000, function()
    return vim.fn.filereadable(ready .. '.' .. name .. '.taken') == 1
  end, 50)
end

local seq = 0
local function replay(id, messages)
  local run = { id = id, buf = view.thread() }
  for _, m in ipairs(messages) do
    seq = seq + 1
    render.message(run, { runId = id, attempt = 1, seq = seq, type = m[1], content = m[2] })
  end
end
local function plan(statuses)
  local entries = {}
  for i, text in ipairs({ 'Read the parser', 'Guard the division by zero', 'Add a test' }) do
    entries[i] = { content = text, status = statuses[i] }
  end
  return { 'plan', { entries = entries } }
end

view.begin_turn('Fix the division by zero in parser.py')
replay('r1', {
  { 'tool.call', { toolCallId = 'todo', name = 'TodoWrite', arguments = { todos = {} } } },
  plan({ 'in_progress', 'pending', 'pending' }),
  { 'tool.completed', { toolCallId = 'todo', name = 'TodoWrite', output = 'Todos updated' } },
  { 'tool.call', { toolCallId = 'task', name = 'Task', arguments = { description = 'Find every division' } } },
  { 'tool.call', { toolCallId = 'c1', name = 'Grep', arguments = { pattern = ' / ' }, parentToolCallId = 'task' } },
  { 'tool.completed', { toolCallId = 'c1', name = 'Grep', output = 'parser.py:2' } },
  { 'tool.call', { toolCallId = 'c2', name = 'Read', arguments = { path = 'parser.py' }, parentToolCallId = 'task' } },
  { 'tool.completed', { toolCallId = 'c2', name = 'Read', output = 'def parse(a, b): ...' } },
  { 'tool.completed', { toolCallId = 'task', name = 'Task', output = 'One division: parser.py line 2.' } },
  { 'assistant', { text = 'The only division is on line 2 of parser.py; I will guard it.' } },
  plan({ 'completed', 'in_progress', 'pending' }),
})
local thread_win = view.thread_win()
vim.api.nvim_win_call(thread_win, function()
  vim.cmd('normal! zMG')
end)
stage('plan') -- the plan, and the subagent folded under its Task line
vim.api.nvim_set_current_win(thread_win)
for i, l in ipairs(vim.api.nvim_buf_get_lines(view.thread(), 0, -1, true)) do
  if l:find('⚙ Task:', 1, true) then
    vim.api.nvim_win_set_cursor(thread_win, { i, 0 })
  end
end
vim.cmd('normal! zo')
stage('subagent') -- the fold opened: the subagent's calls

-- The user types in parser.py and does not save; the agent's write comes as workspace/applyEdit.
local file_win = vim.fn.win_findbuf(vim.fn.bufnr(project .. '/parser.py'))[1]
vim.api.nvim_set_current_win(file_win)
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 2, 3, true, { '# TODO: a docstring (typed, not saved)' })
local client
require('pi_bridge.core.client').with_client(function(c)
  client = c
end)
vim.wait(30000, function()
  return client ~= nil and vim.lsp.buf_is_attached(buf, client.id)
end, 50)
local edit = {
  changes = {
    [vim.uri_from_fname(project .. '/parser.py')] = {
      {
        range = { start = { line = 1, character = 0 }, ['end'] = { line = 1, character = 16 } },
        newText = '    if b == 0:\n        raise ZeroDivisionError("b is 0")\n    return a / b',
      },
    },
  },
}
vim.lsp.handlers['workspace/applyEdit'](nil, { label = 'pi: edit parser.py', edit = edit }, { client_id = client.id })
stage('dirty')
vim.cmd('qa!')
