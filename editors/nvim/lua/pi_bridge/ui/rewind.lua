--- :PiRewind: put the files, the conversation or both back to how they were before a prompt of the
--- chat's conversation (the bridge's checkpoints: `pi/checkpoints`, `pi/rewind`,
--- `pi/checkpointFile`).
---
--- Everything is asked through `vim.ui.select` (Telescope, fzf-lua and snacks pickers work): the
--- checkpoint, then what to restore. Before files change, a preview tab lists the files a dry run
--- says would change (a conflict, a file changed after the checkpoint by someone else than pi, as
--- such) above a diff split of the one under the cursor: the file at the checkpoint against the
--- file now. A confirm then restores, restores and overwrites the conflicts, or cancels; dismissed,
--- the preview stays to browse, and `gr` asks again. After a conversation rewind the chat
--- continues in the session the bridge returns, the rewound prompt back in the prompt area.
local protocol = require('pi_bridge.core.protocol')

local api = vim.api

local M = {}

--- What to restore, in the order the picker lists them.
M.CHOICES = {
  { what = 'both', label = 'files and conversation' },
  { what = 'files', label = 'files only (the conversation goes on as it is)' },
  { what = 'conversation', label = 'conversation only (the files stay as they are)' },
}

--- How each file of a preview changes: its mark in the list and the words after it.
M.CHANGES = {
  restored = { '~', 'back to its text at the checkpoint' },
  removed = { '-', 'created after the checkpoint: removed' },
  recreated = { '+', 'deleted after the checkpoint: comes back' },
  conflict = { '!', 'conflict: changed after the checkpoint, kept unless you overwrite it' },
}

local function notify(msg, level)
  vim.notify('pi_bridge: ' .. msg, level or vim.log.levels.INFO)
end

local function request(method, params, handler)
  require('pi_bridge.core.client').request(method, params, handler)
end

local function first_line(text, max)
  local line = vim.trim((tostring(text or ''):gsub('%s+', ' ')))
  return #line > max and (line:sub(1, max - 1) .. '…') or line
end

--- One vim.ui.select entry of a checkpoint: `(2 min ago) prompt · changed a.txt, b.txt`.
--- @param checkpoint table
--- @return string
function M.checkpoint_label(checkpoint)
  local files = checkpoint.files or {}
  local changed = #files == 0 and 'changed no file' or ('changed ' .. table.concat(files, ', '))
  return ('%s %s · %s'):format(
    require('pi_bridge.ui.chat').ago(checkpoint.createdAt),
    first_line(checkpoint.prompt, 60),
    changed
  )
end

--- The files of a dry run with how each changes; `olds[path]` is its pi/checkpointFile answer.
--- @param dry table {restored: string[], conflicts: string[]}
--- @param olds table<string, table>
--- @param cwd string
--- @return {path: string, change: string, old: table?}[]
function M.preview_files(dry, olds, cwd)
  local files = {}
  for _, path in ipairs(dry.restored or {}) do
    local old = olds[path]
    local change = 'restored'
    if old and (old.content == nil or old.content == vim.NIL) then -- it did not exist
      change = 'removed'
    elseif vim.uv.fs_stat(vim.fs.joinpath(cwd, path)) == nil then
      change = 'recreated'
    end
    files[#files + 1] = { path = path, change = change, old = old }
  end
  for _, path in ipairs(dry.conflicts or {}) do
    files[#files + 1] = { path = path, change = 'conflict', old = olds[path] }
  end
  return files
end

local function lines_of(text)
  local lines = vim.split(text or '', '\n', { plain = true })
  if lines[#lines] == '' then
    lines[#lines] = nil
  end
  return lines
end

local function scratch(name)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  pcall(api.nvim_buf_set_name, buf, name)
  return buf
end

local function set_text(buf, lines)
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, true, lines)
  vim.bo[buf].modifiable = false
end

--- The open preview (nil when none): its tab, windows and files, and which file the diff shows.
--- @type table?
local preview

--- The open preview, for tests and statuslines.
--- @return table?
function M.preview()
  return preview
end

--- Line of the list where the files start (after the heading and a blank line).
local FIRST_FILE_LINE = 3

--- Show file `index` of the preview in its diff split.
--- @param index integer
function M.show(index)
  local p = preview
  local file = p and p.files[index]
  if not file or not api.nvim_tabpage_is_valid(p.tab) then
    return
  end
  p.shown = index
  local absolute = vim.fs.joinpath(p.cwd, file.path)
  for _, win in ipairs({ p.before_win, p.after_win }) do
    api.nvim_win_call(win, function()
      vim.cmd('diffoff')
    end)
  end
  local old = file.old
  local before_lines = {}
  if not old then
    before_lines = { '(the text at the checkpoint could not be read)' }
  elseif old.binary then
    before_lines = { '(a binary file)' }
  elseif type(old.content) == 'string' then
    before_lines = lines_of(old.content)
  end
  set_text(p.before_buf, before_lines)
  vim.bo[p.before_buf].filetype = vim.filetype.match({ filename = file.path }) or ''
  api.nvim_win_call(p.after_win, function()
    if vim.uv.fs_stat(absolute) then
      vim.cmd('edit ' .. vim.fn.fnameescape(absolute))
    else
      local now = scratch('pi-rewind-now://' .. file.path)
      api.nvim_win_set_buf(0, now)
      set_text(now, {})
    end
  end)
  vim.wo[p.before_win].winbar = '%#PiBridgeBanner# at the checkpoint: ' .. file.path
  vim.wo[p.after_win].winbar = '%#PiBridgeBanner# now: '
    .. file.path
    .. ' · '
    .. M.CHANGES[file.change][2]
  for _, win in ipairs({ p.before_win, p.after_win }) do
    api.nvim_win_call(win, function()
      vim.cmd('diffthis')
    end)
  end
end

--- Close the preview tab (the user's file buffers stay).
function M.close_preview()
  local p = preview
  preview = nil
  if p and api.nvim_tabpage_is_valid(p.tab) and #api.nvim_list_tabpages() > 1 then
    api.nvim_set_current_tabpage(p.tab)
    vim.cmd('diffoff!')
    vim.cmd('tabclose')
  end
end

--- Open the preview tab: the list of `files` on top, the diff of the first below.
--- @param files table[]
--- @param cwd string
--- @param title string
--- @param confirm fun() asks the confirm again (the list's `gr`)
local function open_preview(files, cwd, title, confirm)
  M.close_preview()
  vim.cmd('tabnew')
  local tab = api.nvim_get_current_tabpage()
  local list_win = api.nvim_get_current_win()
  local empty = api.nvim_get_current_buf()
  local list_buf = scratch('pi-rewind://preview')
  api.nvim_win_set_buf(list_win, list_buf)
  pcall(api.nvim_buf_delete, empty, { force = true }) -- the tab's own empty buffer
  local lines = { ('pi rewind to %s: %d file(s) change'):format(title, #files), '' }
  for _, file in ipairs(files) do
    local change = M.CHANGES[file.change]
    lines[#lines + 1] = ('%s %s  (%s)'):format(change[1], file.path, change[2])
  end
  if #files == 0 then
    lines[#lines + 1] = '(no file changes)'
  end
  set_text(list_buf, lines)
  vim.wo[list_win].winbar = '%#PiBridgeBanner# <CR> diff of the file · gr restore… · q cancel'
  vim.cmd('belowright split')
  local after_win = api.nvim_get_current_win()
  vim.cmd('leftabove vnew')
  local before_win = api.nvim_get_current_win()
  local before_buf = api.nvim_get_current_buf()
  vim.bo[before_buf].buftype = 'nofile'
  vim.bo[before_buf].bufhidden = 'wipe'
  vim.bo[before_buf].swapfile = false
  pcall(api.nvim_buf_set_name, before_buf, 'pi-rewind-checkpoint://preview')
  api.nvim_win_set_height(list_win, math.min(#lines, 10))
  preview = {
    tab = tab,
    cwd = cwd,
    files = files,
    list_buf = list_buf,
    list_win = list_win,
    before_buf = before_buf,
    before_win = before_win,
    after_win = after_win,
  }
  local function file_under_cursor()
    return api.nvim_win_get_cursor(list_win)[1] - FIRST_FILE_LINE + 1
  end
  local opts = { buffer = list_buf, nowait = true, silent = true }
  vim.keymap.set('n', '<CR>', function()
    M.show(file_under_cursor())
  end, vim.tbl_extend('force', opts, { desc = 'pi: diff of this file' }))
  vim.keymap.set('n', 'gr', confirm, vim.tbl_extend('force', opts, { desc = 'pi: restore…' }))
  vim.keymap.set('n', 'q', function()
    M.close_preview()
    notify('rewind cancelled')
  end, vim.tbl_extend('force', opts, { desc = 'pi: cancel the rewind' }))
  api.nvim_create_autocmd('CursorMoved', {
    buffer = list_buf,
    callback = function()
      local index = file_under_cursor()
      if preview and index ~= preview.shown and preview.files[index] then
        M.show(index)
      end
    end,
  })
  if #files > 0 then
    M.show(1)
    pcall(api.nvim_win_set_cursor, list_win, { FIRST_FILE_LINE, 0 })
  end
  api.nvim_set_current_win(list_win)
end

--- What a finished rewind did, in one line.
--- @param what string
--- @param result table
--- @param prompt string
--- @return string
function M.summary(what, result, prompt)
  local parts = {}
  if what ~= 'conversation' then
    local n = #(result.restored or {})
    parts[#parts + 1] = n == 1 and 'restored 1 file' or ('restored %d files'):format(n)
    local conflicts = result.conflicts or {}
    if #conflicts > 0 then
      parts[#parts + 1] = ('kept %d changed after the checkpoint (%s)'):format(
        #conflicts,
        table.concat(conflicts, ', ')
      )
    end
  end
  if what ~= 'files' then
    parts[#parts + 1] = ('the conversation continues from before "%s"'):format(
      first_line(prompt, 60)
    )
  end
  return table.concat(parts, '; ')
end

--- Rewind for real, then continue the chat in the returned session.
local function rewind(params, checkpoint, on_done)
  request(protocol.REWIND, params, function(err, result)
    if err or not result then
      notify('rewind failed: ' .. (err and err.message or 'no answer'), vim.log.levels.ERROR)
      return on_done(nil)
    end
    local function finish()
      notify(M.summary(params.restore, result, checkpoint.prompt))
      on_done(result)
    end
    if params.restore == 'files' then
      return finish()
    end
    require('pi_bridge.ui.chat').resume(result.sessionId, function(ok)
      local prompt = require('pi_bridge.ui.chat_view').prompt()
      if ok and prompt then
        api.nvim_buf_set_lines(prompt, 0, -1, true, vim.split(checkpoint.prompt, '\n'))
      end
      finish()
    end)
  end)
end

--- The preview of a files (or both) rewind, then the confirm.
local function preview_then_confirm(params, checkpoint, on_done)
  local dry_params = vim.tbl_extend('force', params, { dryRun = true })
  request(protocol.REWIND, dry_params, function(err, dry)
    if err or not dry then
      notify('the dry run failed: ' .. (err and err.message or 'no answer'), vim.log.levels.ERROR)
      return on_done(nil)
    end
    local paths = vim.list_extend(vim.deepcopy(dry.restored or {}), dry.conflicts or {})
    local olds, waiting = {}, #paths
    local function ready()
      local cwd = vim.fn.getcwd()
      local files = M.preview_files(dry, olds, cwd)
      local title = ('before "%s"'):format(first_line(checkpoint.prompt, 40))
      local function confirm()
        local conflicts = #(dry.conflicts or {})
        local also = params.restore == 'both' and ' and the conversation' or ''
        local items = {
          {
            force = false,
            label = ('restore %d file(s)%s'):format(#files - conflicts, also)
              .. (conflicts > 0 and (', keep the %d conflict(s)'):format(conflicts) or ''),
          },
        }
        if conflicts > 0 then
          items[#items + 1] = {
            force = true,
            label = ('restore %d file(s)%s, overwrite the conflicts'):format(#files, also),
          }
        end
        items[#items + 1] = { cancel = true, label = 'cancel' }
        vim.ui.select(items, {
          prompt = ('pi: rewind to %s?'):format(title),
          kind = 'pi_bridge.rewind_confirm',
          format_item = function(item)
            return item.label
          end,
        }, function(choice)
          if not choice then
            return -- the preview stays; gr asks again, q cancels
          end
          M.close_preview()
          if choice.cancel then
            notify('rewind cancelled')
            return on_done(nil)
          end
          rewind(vim.tbl_extend('force', params, { force = choice.force }), checkpoint, on_done)
        end)
      end
      open_preview(files, cwd, title, confirm)
      confirm()
    end
    if waiting == 0 then
      return ready()
    end
    for _, path in ipairs(paths) do
      local file_params = {
        sessionId = params.sessionId,
        checkpointId = params.checkpointId,
        path = path,
      }
      request(protocol.CHECKPOINT_FILE, file_params, function(file_err, old)
        olds[path] = not file_err and old or nil
        waiting = waiting - 1
        if waiting == 0 then
          ready()
        end
      end)
    end
  end)
end

--- :PiRewind: pick a checkpoint of the chat's conversation, what to restore, preview, confirm,
--- rewind. `on_done(result)` gets the pi/rewind answer (nil: cancelled or failed).
--- @param on_done fun(result: table?)?
function M.pick(on_done)
  on_done = on_done or function() end
  local chat = require('pi_bridge.ui.chat')
  local session_id = chat.state().session_id
  if not session_id then
    notify('no conversation to rewind: send a prompt in :PiChat first (or open one, :PiSessions)')
    return on_done(nil)
  end
  if chat.running() then
    notify('a run of this conversation is going: stop it (:PiStop) or wait, then rewind')
    return on_done(nil)
  end
  local run = chat.state().run
  if run and not (run.result or run.error or run.cancel_result) then
    -- The turn has ended, its pi/run not answered yet: the bridge records the checkpoint first.
    vim.wait(5000, function()
      return run.result ~= nil or run.error ~= nil or run.cancel_result ~= nil
    end, 20)
  end
  -- The bridge records a turn's checkpoint just after the turn has answered: a list asked for
  -- right then may lack the last turn's, so it is asked again a bounded number of times.
  local last = run and run.id
  local on_list
  local function list(tries)
    request(protocol.CHECKPOINTS, { sessionId = session_id }, function(err, answer)
      local has_last = not last
        or vim.iter((answer and answer.checkpoints) or {}):any(function(c)
          return c.runId == last
        end)
      if not err and answer and answer.available and not has_last and tries > 1 then
        vim.defer_fn(function()
          list(tries - 1)
        end, 100)
        return
      end
      on_list(err, answer)
    end)
  end
  on_list = function(err, answer)
    if err or not answer then
      local why = err and err.message or 'no answer'
      notify('cannot list the checkpoints: ' .. why, vim.log.levels.WARN)
      return on_done(nil)
    end
    if not answer.available then
      local why = tostring(answer.reason or 'no reason given')
      notify('checkpoints are off: ' .. why, vim.log.levels.WARN)
      return on_done(nil)
    end
    local checkpoints = {}
    for i = #(answer.checkpoints or {}), 1, -1 do -- newest first
      checkpoints[#checkpoints + 1] = answer.checkpoints[i]
    end
    if #checkpoints == 0 then
      notify('this conversation has no checkpoint')
      return on_done(nil)
    end
    vim.ui.select(checkpoints, {
      prompt = 'pi: rewind to before which prompt?',
      kind = 'pi_bridge.checkpoint',
      format_item = M.checkpoint_label,
    }, function(checkpoint)
      if not checkpoint then
        return on_done(nil)
      end
      local notes = checkpoint.notes or {}
      vim.ui.select(M.CHOICES, {
        prompt = 'pi: restore what?'
          .. (#notes > 0 and (' (' .. table.concat(notes, '; ') .. ')') or ''),
        kind = 'pi_bridge.rewind_what',
        format_item = function(choice)
          return choice.label
        end,
      }, function(choice)
        if not choice then
          return on_done(nil)
        end
        local params = {
          sessionId = session_id,
          checkpointId = checkpoint.checkpointId,
          restore = choice.what,
        }
        if choice.what ~= 'conversation' then
          return preview_then_confirm(params, checkpoint, on_done)
        end
        vim.ui.select({ 'continue from before that prompt', 'cancel' }, {
          prompt = ('pi: rewind the conversation to before "%s"? (this one stays in %s)'):format(
            first_line(checkpoint.prompt, 40),
            ':PiSessions'
          ),
          kind = 'pi_bridge.rewind_confirm',
        }, function(ok)
          if ok ~= 'continue from before that prompt' then
            return on_done(nil)
          end
          rewind(params, checkpoint, on_done)
        end)
      end)
    end)
  end
  list(30)
end

return M
