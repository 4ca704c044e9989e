-- Drives a real (tmux) Neovim for the README's screenshot: a file on the left, the chat on the
-- right with a tool turn and an edit turn against the bridge's scripted model. Writes the file
-- named by $PI_BRIDGE_SHOT_READY when the screen is ready to be captured.
-- Env: PI_BRIDGE_PYTHON, PI_BRIDGE_SHOT_ROOT (repo), PI_BRIDGE_SHOT_PROJECT (a scratch project dir).
local root, project = dofile(
  assert(os.getenv('PI_BRIDGE_SHOT_ROOT')) .. '/editors/nvim/tests/support/shot_nvim.lua'
)({
  statusline = "%f %= %{v:lua.require'pi_bridge'.status()} ",
  setup = { models = { 'fake/tool', 'fake/edit' } },
})
local pi_bridge = require('pi_bridge')
vim.fn.writefile({ 'line one', 'line two', 'line three' }, project .. '/notes.txt')
vim.cmd('edit notes.txt')
local chat = require('pi_bridge.ui.chat')
vim.cmd('PiChat')

local plain_select = vim.ui.select -- Neovim's own, for the approval picture
dofile(root .. '/editors/nvim/tests/support/approve_all.lua') -- the user allows each tool call
local function turn(model, prompt)
  chat.state().model = model
  chat.send(prompt)
  local run = chat.state().run
  vim.wait(90000, function()
    return run.done
  end, 50)
end

turn('tool', 'What does `echo hi` print here?')
turn('edit', 'In notes.txt, write "line 2, edited" instead of "line two".')
vim.cmd('checktime')
vim.api.nvim_buf_set_lines(
  require('pi_bridge.ui.chat_view').prompt(),
  0,
  -1,
  true,
  { 'Now add a test for it' }
)
vim.cmd('stopinsert')
vim.cmd('redraw!')
local ready = assert(os.getenv('PI_BRIDGE_SHOT_READY'))
vim.defer_fn(function()
  vim.fn.writefile({ 'ready' }, ready)
  -- second picture, once the first is taken: :PiDiff on the edit line
  vim.wait(30000, function()
    return vim.fn.filereadable(ready .. '.next') == 1
  end, 50)
  local view = require('pi_bridge.ui.chat_view')
  local win = view.thread_win()
  vim.api.nvim_set_current_win(win)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(view.thread(), 0, -1, true)) do
    if l:find('⚙ edit:', 1, true) then
      vim.api.nvim_win_set_cursor(win, { i, 0 })
    end
  end
  vim.cmd('PiDiff')
  vim.cmd('redraw!')
  vim.defer_fn(function()
    vim.fn.writefile({ 'ready' }, ready .. '.diff')
    -- third picture: the bridge asks before a write, in Neovim's own vim.ui.select
    vim.wait(30000, function()
      return vim.fn.filereadable(ready .. '.next2') == 1
    end, 50)
    vim.cmd('diffoff!')
    vim.cmd('only')
    -- pi's edit of the open notes.txt went through its buffer (the editor's own surface): saved
    -- here as a user would, so the buffer can be shown again
    vim.cmd('silent! wall')
    vim.cmd('edit ' .. vim.fn.fnameescape(project .. '/notes.txt'))
    vim.cmd('PiChat')
    vim.ui.select = function(items, opts, on_choice)
      -- the thread's end in sight above the question (which covers the screen's lower part):
      -- the tool line waiting for the answer
      local thread_win = view.thread_win()
      local last = vim.api.nvim_buf_line_count(view.thread())
      vim.api.nvim_win_set_cursor(thread_win, { math.max(1, last - 8), 0 })
      vim.api.nvim_win_call(thread_win, function()
        vim.cmd('normal! zt')
      end)
      vim.cmd('redraw!')
      vim.fn.writefile({ 'ready' }, ready .. '.approval')
      return plain_select(items, opts, on_choice)
    end
    chat.state().model = 'write'
    chat.send('Create created/new.txt with two lines.')
  end, 500)
end, 500)
