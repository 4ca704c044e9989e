--- The chat's windows and buffers: the thread (a markdown scratch buffer, one `## You` / `## pi`
--- pair per turn, which render.lua streams each run into) and the prompt area below it.
---
--- This module only draws and maps keys; what a key does is chat.lua's (the conversation).
local render = require('pi_bridge.ui.render')

local api = vim.api

local M = {}

local TITLE = '# pi chat'
local YOU = '## You'
local PI = '## pi'
local PROMPT_HEIGHT = 5

--- @type integer?
local thread_buf
--- @type integer?
local prompt_buf

local with_modifiable = render.with_modifiable

local function scratch(name, filetype)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = filetype
  pcall(api.nvim_buf_set_name, buf, name)
  return buf
end

--- Map every key of `lhs` (a string, a list, or false: unmapped) in `modes` of `buf`.
local function map(buf, modes, lhs, rhs, desc)
  if not lhs then
    return
  end
  for _, key in ipairs(type(lhs) == 'table' and lhs or { lhs }) do
    vim.keymap.set(modes, key, rhs, { buffer = buf, nowait = true, silent = true, desc = desc })
  end
end

--- Highlight groups of the chat, each only linked (default = true: a colour scheme wins).
M.highlights = {
  PiBridgeTurnHeader = 'Title',
  PiBridgeToolOk = 'DiagnosticOk',
  PiBridgeToolFailed = 'DiagnosticError',
  PiBridgeToolRunning = 'DiagnosticInfo',
  PiBridgeThought = 'Comment',
  PiBridgeSteered = 'DiagnosticHint',
  PiBridgeAdded = 'DiffAdd',
  PiBridgeRemoved = 'DiffDelete',
  PiBridgeBanner = 'WinBar',
  PiBridgeCompaction = 'DiagnosticInfo',
}

function M.define_highlights()
  for group, link in pairs(M.highlights) do
    api.nvim_set_hl(0, group, { link = link, default = true })
  end
end

--- Window-local matches (they work with or without treesitter's markdown highlighting).
local function add_matches(win)
  if vim.w[win].pi_bridge_matches then
    return
  end
  vim.w[win].pi_bridge_matches = true
  api.nvim_win_call(win, function()
    vim.fn.matchadd('PiBridgeTurnHeader', [[^## \(You\|pi\)$]])
    vim.fn.matchadd('PiBridgeToolOk', [[^⚙ .*\zs\[done\]$]])
    vim.fn.matchadd('PiBridgeToolFailed', [[^⚙ .*\zs\[\(failed\|cancelled\|denied\)\]$]])
    vim.fn.matchadd('PiBridgeToolRunning', [[^⚙ .*\zs\[\(running\|waiting for you\)\]$]])
    vim.fn.matchadd('PiBridgeAdded', [[^⚙ \(edit\|write\):.* \zs+\d\+\ze -\d\+]])
    vim.fn.matchadd('PiBridgeRemoved', [[^⚙ \(edit\|write\):.* +\d\+ \zs-\d\+]])
    vim.fn.matchadd('PiBridgeThought', [[^▸ thought$]])
    vim.fn.matchadd('PiBridgeSteered', [[^➜ steered: .*$]])
    vim.fn.matchadd('PiBridgeCompaction', [[^── \(Context compacted\|compacting\).*$]])
  end)
end

--- Jump to the next (`dir` 1) or previous (-1) turn header in the thread window.
--- @param dir integer
function M.jump_turn(dir)
  local flags = dir > 0 and 'W' or 'bW'
  if vim.fn.search([[^## \(You\|pi\)$]], flags) == 0 then
    vim.notify(
      'pi_bridge: no ' .. (dir > 0 and 'next' or 'previous') .. ' turn',
      vim.log.levels.INFO
    )
  end
end

--- Create the buffers once and map the keys of `actions` (chat.lua's functions).
--- @param keys table<string, string|string[]|false>
--- @param actions table<string, function>
--- @param slash_complete boolean
local function ensure_buffers(keys, actions, slash_complete)
  if thread_buf and api.nvim_buf_is_valid(thread_buf) then
    return
  end
  thread_buf = scratch('pi://chat', 'markdown')
  render.attach(thread_buf)
  with_modifiable(thread_buf, function()
    api.nvim_buf_set_lines(thread_buf, 0, -1, true, { TITLE })
  end)
  prompt_buf = scratch('pi://chat-prompt', 'markdown')
  vim.b[prompt_buf].pi_bridge_prompt = true
  vim.bo[prompt_buf].omnifunc = "v:lua.require'pi_bridge.ui.commands'.omnifunc"
  if slash_complete then
    -- `/` at the start of the prompt opens the list of the conversation's commands.
    vim.keymap.set('i', '/', function()
      local row, col = unpack(api.nvim_win_get_cursor(0))
      local at_start = row == 1 and api.nvim_get_current_line():sub(1, col):match('^%s*$')
      return at_start and '/<C-x><C-o>' or '/'
    end, { buffer = prompt_buf, expr = true, desc = 'pi: / completes the commands' })
  end
  api.nvim_create_autocmd('BufWinEnter', {
    buffer = thread_buf,
    callback = function()
      local win = api.nvim_get_current_win()
      render.set_window_options(win)
      add_matches(win)
    end,
  })
  for _, buf in ipairs({ thread_buf, prompt_buf }) do
    map(buf, 'n', keys.send, actions.send, 'pi: send the prompt (steers while a run goes)')
    map(buf, 'n', keys.stop, actions.stop, 'pi: stop the run')
    map(buf, 'n', keys.steer, actions.steer, 'pi: steer the run with the prompt')
    map(buf, 'n', keys.model, actions.model, 'pi: pick the model and thinking level')
    map(buf, 'n', keys.new, actions.new, 'pi: new conversation')
  end
  map(prompt_buf, 'i', keys.send_insert, actions.send, 'pi: send the prompt')
  map(prompt_buf, 'i', keys.stop_insert, actions.stop, 'pi: stop the run')
  map(thread_buf, 'n', keys.next_turn, function()
    M.jump_turn(1)
  end, 'pi: next turn')
  map(thread_buf, 'n', keys.prev_turn, function()
    M.jump_turn(-1)
  end, 'pi: previous turn')
  map(thread_buf, 'n', keys.diff, actions.diff, 'pi: diff of the edit under the cursor')
end

--- The thread's buffer (nil before the first :PiChat).
--- @return integer?
function M.thread()
  return thread_buf and api.nvim_buf_is_valid(thread_buf) and thread_buf or nil
end

--- The prompt area's buffer.
--- @return integer?
function M.prompt()
  return prompt_buf and api.nvim_buf_is_valid(prompt_buf) and prompt_buf or nil
end

--- The window showing the thread, if any (in the current tab first).
--- @return integer?
function M.thread_win()
  local buf = M.thread()
  return buf and vim.fn.win_findbuf(buf)[1] or nil
end

--- Show the chat (a split with the thread above the prompt area) and put the cursor in the prompt.
--- @param layout 'split'|'vsplit'
--- @param keys table
--- @param actions table
--- @param slash_complete boolean? `/` at the prompt's start opens the command completion
function M.open(layout, keys, actions, slash_complete)
  M.define_highlights()
  ensure_buffers(keys, actions, slash_complete ~= false)
  local pwin = vim.fn.win_findbuf(prompt_buf)[1]
  if not M.thread_win() then
    vim.cmd(layout == 'vsplit' and 'botright vsplit' or 'botright split')
    api.nvim_win_set_buf(0, thread_buf)
    local last = api.nvim_buf_line_count(thread_buf)
    api.nvim_win_set_cursor(0, { last, 0 })
    pwin = nil
  end
  if not pwin then
    api.nvim_set_current_win(M.thread_win())
    vim.cmd('belowright ' .. PROMPT_HEIGHT .. 'split')
    api.nvim_win_set_buf(0, prompt_buf)
    vim.wo.winfixheight = true
    vim.wo.winbar = ' prompt: '
      .. table.concat(
        vim.tbl_filter(function(s)
          return s ~= ''
        end, {
          M.key_hint(keys.send, 'send'),
          M.key_hint(keys.send_insert, 'send (insert)'),
          M.key_hint(keys.stop, 'stop'),
          M.key_hint(keys.model, 'model'),
        }),
        ' · '
      )
    pwin = api.nvim_get_current_win()
  end
  api.nvim_set_current_win(pwin)
end

--- "<CR> send" for a banner, or '' for an unmapped key.
--- @param lhs string|string[]|false
--- @param what string
--- @return string
function M.key_hint(lhs, what)
  if not lhs then
    return ''
  end
  local first = type(lhs) == 'table' and lhs[1] or lhs
  return first and (first .. ' ' .. what) or ''
end

--- The prompt area's text (trimmed), and clear it.
--- @return string
function M.take_prompt()
  local buf = M.prompt()
  if not buf then
    return ''
  end
  local text = vim.trim(table.concat(api.nvim_buf_get_lines(buf, 0, -1, true), '\n'))
  if text ~= '' then
    api.nvim_buf_set_lines(buf, 0, -1, true, { '' })
  end
  return text
end

--- Put `texts` back in the prompt area, ahead of what it holds (a blank line between each).
--- @param texts string[]
function M.give_back(texts)
  local buf = M.prompt()
  if not buf then
    return
  end
  local lines = {}
  for _, text in ipairs(texts) do
    vim.list_extend(lines, vim.split(text, '\n', { plain = true }))
    lines[#lines + 1] = ''
  end
  local draft = api.nvim_buf_get_lines(buf, 0, -1, true)
  if vim.trim(table.concat(draft, '\n')) ~= '' then
    vim.list_extend(lines, draft)
  else
    lines[#lines] = nil
  end
  api.nvim_buf_set_lines(buf, 0, -1, true, lines)
end

local function append(lines)
  local buf = thread_buf --[[@as integer]]
  local follow = {}
  local last = api.nvim_buf_line_count(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if api.nvim_win_get_cursor(win)[1] >= last then
      follow[#follow + 1] = win
    end
  end
  with_modifiable(buf, function()
    api.nvim_buf_set_lines(buf, -1, -1, true, lines)
  end)
  render.break_stream(buf)
  last = api.nvim_buf_line_count(buf)
  for _, win in ipairs(follow) do
    api.nvim_win_set_cursor(win, { last, 0 })
  end
end

--- Start a turn: the user's prompt under `## You`, then `## pi` for the answer to stream under.
--- @param prompt string
function M.begin_turn(prompt)
  local lines = { '', YOU, '' }
  vim.list_extend(lines, vim.split(prompt, '\n', { plain = true }))
  vim.list_extend(lines, { '', PI, '' })
  append(lines)
end

--- A line of its own in the thread (e.g. a notice).
--- @param text string
function M.note(text)
  append({ '', text })
end

--- The thread's first line names the conversation: `# pi chat: <title>`.
--- @param title string?
function M.set_title(title)
  local buf = M.thread()
  if not buf then
    return
  end
  with_modifiable(buf, function()
    api.nvim_buf_set_lines(buf, 0, 1, true, { title and (TITLE .. ': ' .. title) or TITLE })
  end)
end

--- Empty the thread (a new conversation), with `title` on its first line.
--- @param title string?
function M.clear(title)
  local buf = M.thread()
  if not buf then
    return
  end
  render.attach(buf) -- forget the tools of the old thread
  with_modifiable(buf, function()
    api.nvim_buf_set_lines(buf, 0, -1, true, { title and (TITLE .. ': ' .. title) or TITLE })
  end)
end

return M
