--- `:PiDiff`: an edit's before and after in Neovim's diff mode, in a new tab.
---
--- Left: a scratch buffer holding the file before the tool ran (`diff.oldText`); right: the file
--- itself (its text now, normally `diff.newText`). A one-line banner lists the keys; the revert key
--- writes `oldText` back to the file.
local api = vim.api

local M = {}

local function lines_of(text)
  local lines = vim.split(text or '', '\n', { plain = true })
  if lines[#lines] == '' then
    lines[#lines] = nil -- the text's final newline
  end
  return lines
end

--- Open the diff of a `tool.completed` diff ({path, oldText?, newText?, line}).
--- @param diff table
--- @param keys {revert: string|false, close: string|false}
--- @return {tab: integer, before: integer, after: integer}? the tab and the two buffers
function M.open(diff, keys)
  if type(diff) ~= 'table' or type(diff.path) ~= 'string' then
    vim.notify('pi_bridge: no diff here', vim.log.levels.INFO)
    return nil
  end
  if diff.oldText == nil and diff.newText == nil then
    vim.notify(
      'pi_bridge: the file was too big to keep its texts: ' .. diff.path,
      vim.log.levels.INFO
    )
  end
  vim.cmd('tabnew ' .. vim.fn.fnameescape(diff.path))
  local tab = api.nvim_get_current_tabpage()
  local after_win, after = api.nvim_get_current_win(), api.nvim_get_current_buf()
  local filetype = vim.bo[after].filetype
  vim.cmd('leftabove vnew')
  local before_win, before = api.nvim_get_current_win(), api.nvim_get_current_buf()
  vim.bo[before].buftype = 'nofile'
  vim.bo[before].bufhidden = 'wipe'
  vim.bo[before].swapfile = false
  pcall(api.nvim_buf_set_name, before, 'pi-before://' .. diff.path)
  local old = type(diff.oldText) == 'string' and diff.oldText or ''
  api.nvim_buf_set_lines(before, 0, -1, true, lines_of(old))
  vim.bo[before].modifiable = false
  vim.bo[before].filetype = filetype
  for _, win in ipairs({ before_win, after_win }) do
    api.nvim_win_call(win, function()
      vim.cmd('diffthis')
    end)
  end
  local hint = { ']c/[c hunks' }
  if keys.revert then
    hint[#hint + 1] = keys.revert .. ' revert'
  end
  if keys.close then
    hint[#hint + 1] = keys.close .. ' close'
  end
  local name = vim.fn.fnamemodify(diff.path, ':~:.')
  vim.wo[before_win].winbar = '%#PiBridgeBanner# pi diff · before · '
    .. table.concat(hint, ' · ')
  vim.wo[after_win].winbar = '%#PiBridgeBanner# after: '
    .. name
    .. ' · '
    .. table.concat(hint, ' · ')
  local function close()
    -- the after buffer is the user's file: take the diff's keys off it again
    for _, lhs in ipairs({ keys.close, keys.revert }) do
      if lhs and api.nvim_buf_is_valid(after) then
        pcall(vim.keymap.del, 'n', lhs, { buffer = after })
      end
    end
    if api.nvim_tabpage_is_valid(tab) and #api.nvim_list_tabpages() > 1 then
      api.nvim_set_current_tabpage(tab)
      vim.cmd('diffoff!')
      vim.cmd('tabclose')
    end
  end
  local function revert()
    if diff.oldText == nil then
      vim.notify(
        'pi_bridge: the file did not exist before; delete it yourself',
        vim.log.levels.WARN
      )
      return
    end
    api.nvim_buf_set_lines(after, 0, -1, true, lines_of(diff.oldText))
    api.nvim_buf_call(after, function()
      vim.cmd('silent write')
    end)
    vim.notify('pi_bridge: reverted ' .. diff.path, vim.log.levels.INFO)
  end
  for _, buf in ipairs({ before, after }) do
    if keys.close then
      vim.keymap.set(
        'n',
        keys.close,
        close,
        { buffer = buf, nowait = true, desc = 'pi: close the diff' }
      )
    end
    if keys.revert then
      vim.keymap.set('n', keys.revert, revert, { buffer = buf, desc = 'pi: revert the file' })
    end
  end
  if type(diff.line) == 'number' then
    pcall(api.nvim_win_set_cursor, after_win, { diff.line, 0 })
  end
  api.nvim_set_current_win(after_win)
  return { tab = tab, before = before, after = after }
end

--- Open a change pi asks to make (pi/requestPermission's diff) in diff mode before it is made:
--- the file now against the file as the change would leave it, both scratch buffers, so nothing
--- can write the file from here. `q` closes the tab.
--- @param diff table {path, oldText?, newText?}
--- @return {tab: integer, before: integer, after: integer}?
function M.open_proposed(diff)
  if type(diff) ~= 'table' or type(diff.path) ~= 'string' then
    return nil
  end
  local filetype = vim.filetype.match({ filename = diff.path }) or ''
  local name = vim.fn.fnamemodify(diff.path, ':~:.')
  vim.cmd('tabnew')
  local tab = api.nvim_get_current_tabpage()
  local after_win = api.nvim_get_current_win()
  vim.cmd('leftabove vnew')
  local before_win = api.nvim_get_current_win()
  local bufs = {}
  for _, side in ipairs({
    { win = before_win, text = diff.oldText, label = 'now' },
    { win = after_win, text = diff.newText, label = 'as pi would leave it' },
  }) do
    local buf = api.nvim_win_get_buf(side.win)
    vim.bo[buf].buftype = 'nofile'
    vim.bo[buf].bufhidden = 'wipe'
    vim.bo[buf].swapfile = false
    pcall(api.nvim_buf_set_name, buf, ('pi-proposed://%s/%s'):format(side.label, diff.path))
    api.nvim_buf_set_lines(buf, 0, -1, true, lines_of(type(side.text) == 'string' and side.text or ''))
    vim.bo[buf].modifiable = false
    vim.bo[buf].filetype = filetype
    vim.wo[side.win].winbar = ('%%#PiBridgeBanner# pi asks · %s: %s · q close'):format(side.label, name)
    api.nvim_win_call(side.win, function()
      vim.cmd('diffthis')
    end)
    vim.keymap.set('n', 'q', function()
      if api.nvim_tabpage_is_valid(tab) and #api.nvim_list_tabpages() > 1 then
        api.nvim_set_current_tabpage(tab)
        vim.cmd('tabclose')
      end
    end, { buffer = buf, nowait = true, desc = 'pi: close the proposed diff' })
    bufs[#bufs + 1] = buf
  end
  api.nvim_set_current_win(after_win)
  return { tab = tab, before = bufs[1], after = bufs[2] }
end

return M
