--- The view of a run: a scratch buffer (in a split or a float) that the run streams into.
---
--- Line 1 is a header with the run's status. Assistant text is appended as it streams; a thought
--- is a closed fold under a `▸ thought` line; a tool call is one line whose status changes in
--- place, with its output folded under it. The last line says how the run ended.
---
--- Folds come from the lines' own text (foldexpr): Neovim recomputes expression folds for the
--- lines that change, so a fold that depended on marks set after the change would go stale.
local protocol = require('pi_bridge.core.protocol')

local T = protocol.types
local api = vim.api

local M = {}

local ns_tool = api.nvim_create_namespace('pi_bridge_tool')

local MAX_OUTPUT_LINES = 200
-- A tool's mark stays on its line when the line is rewritten in place (the default right gravity
-- would move it to the end of the replaced range, i.e. onto the next line).
local MARK = { right_gravity = false }

local THOUGHT = '▸ thought'
local TOOL = '⚙ '
local BODY = '  │ '
--- A stopped run's footer: its receipt is folded under it.
local STOPPED = '── stopped'
--- A tool line's status while the bridge waits for the user's approval.
local WAITING = 'waiting for you'
--- The head of the agent's plan (the contract's `plan`), redrawn in place as it changes.
local PLAN = '▤ plan'
local PLAN_ICONS = { pending = '○', in_progress = '◐', completed = '✓' }

--- @class pi_bridge.View
--- @field text_open boolean the last line is assistant text that the next delta continues
--- @field thought_open boolean the last block is a live thought that the next fragment continues
--- @field tools table<string, {mark: integer, name: string, summary: string, lines: integer, status: string, diff: table?, kids: integer?, child: boolean?}>
--- @field plan {mark: integer, lines: integer}? where the run's plan is drawn
--- @field header boolean? false: no run header on line 1 (the chat buffer holds many runs)

--- @type table<integer, pi_bridge.View>
local views = {}
--- The window that shows runs; a new run replaces the buffer in it.
--- @type integer?
local run_win

--- Run `fn` with `buf` modifiable (views are not modifiable by the user).
--- @param buf integer
--- @param fn function
local function with_modifiable(buf, fn)
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn)
  vim.bo[buf].modifiable = false
  if not ok then
    error(err)
  end
end
M.with_modifiable = with_modifiable

--- Windows showing `buf` whose cursor sits on its last line: they follow the stream.
local function followers(buf)
  local last = api.nvim_buf_line_count(buf)
  local wins = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if api.nvim_win_get_cursor(win)[1] >= last then
      wins[#wins + 1] = win
    end
  end
  return wins
end

local function follow(buf, wins)
  local last = api.nvim_buf_line_count(buf)
  for _, win in ipairs(wins) do
    if api.nvim_win_is_valid(win) then
      api.nvim_win_set_cursor(win, { last, 0 })
    end
  end
end

--- Append lines at the end.
local function append(buf, lines)
  local first = api.nvim_buf_line_count(buf)
  api.nvim_buf_set_lines(buf, -1, -1, true, lines)
  return first -- 0-based row of the first appended line
end

local function split_lines(text)
  return vim.split(text, '\n', { plain = true })
end

local function body(lines)
  return vim.tbl_map(function(l)
    return BODY .. l
  end, lines)
end

local function header(run)
  local first = split_lines(run.params.prompt)[1]
  if #first > 60 then
    first = first:sub(1, 57) .. '...'
  end
  return ('pi ▸ %s  [%s]'):format(first, run.status)
end

--- `foldexpr` of run buffers: a fold per thought and per tool call.
--- @param lnum integer
--- @return string
function M.foldexpr(lnum)
  local line = vim.fn.getline(lnum)
  if vim.startswith(line, BODY) then
    return '1'
  end
  if vim.startswith(line, TOOL) or line == THOUGHT or vim.startswith(line, STOPPED) then
    return '>1'
  end
  return '0'
end

--- Icons of the fold text by a tool line's status.
local ICONS = {
  done = '✓',
  failed = '✗',
  cancelled = '✗',
  denied = '✗',
  running = '…',
  [WAITING] = '⏸',
}

--- `foldtext` of run buffers: the fold's first line (a tool's with ✓/✗ for its status) and how
--- many lines it hides.
--- @return string
function M.foldtext()
  local line = vim.fn.getline(vim.v.foldstart)
  local status = vim.startswith(line, TOOL) and line:match('%[([%a ]+)%]$')
  if status and ICONS[status] then
    line = ICONS[status] .. line:sub(#TOOL)
  end
  local hidden = vim.v.foldend - vim.v.foldstart
  return hidden > 0 and ('%s  (+%d lines)'):format(line, hidden) or line
end

local function set_window_options(win)
  local wo = { scope = 'local', win = win }
  api.nvim_set_option_value('foldmethod', 'expr', wo)
  api.nvim_set_option_value('foldexpr', "v:lua.require'pi_bridge.ui.render'.foldexpr(v:lnum)", wo)
  api.nvim_set_option_value('foldtext', "v:lua.require'pi_bridge.ui.render'.foldtext()", wo)
  api.nvim_set_option_value('foldlevel', 0, wo)
  api.nvim_set_option_value('foldenable', true, wo)
  api.nvim_set_option_value('wrap', true, wo)
  api.nvim_set_option_value('linebreak', true, wo)
  api.nvim_set_option_value('fillchars', 'fold: ', wo)
end
M.set_window_options = set_window_options

--- Make `buf` a view that runs stream into without a header line of their own (the chat).
--- @param buf integer
function M.attach(buf)
  views[buf] = { text_open = false, thought_open = false, tools = {}, header = false }
end

--- The next message starts a new block (a new turn was written into the buffer by its owner).
--- @param buf integer
function M.break_stream(buf)
  local view = views[buf]
  if view then
    view.text_open, view.thought_open = false, false
  end
end

--- The tool drawn at 1-based line `lnum` of `buf` (its line or its folded output), if any.
--- @param buf integer
--- @param lnum integer
--- @return table? tool {name, summary, status, diff?}
function M.tool_at(buf, lnum)
  local view = views[buf]
  if not view then
    return nil
  end
  while lnum > 1 and vim.startswith(api.nvim_buf_get_lines(buf, lnum - 1, lnum, true)[1], BODY) do
    lnum = lnum - 1
  end
  for _, tool in pairs(view.tools) do
    local pos = api.nvim_buf_get_extmark_by_id(buf, ns_tool, tool.mark, {})
    if pos[1] == lnum - 1 then
      return tool
    end
  end
  return nil
end

local function open_window(buf, view)
  if view == 'none' then
    return
  end
  local is_float = view == 'float'
  if
    run_win
    and api.nvim_win_is_valid(run_win)
    and (api.nvim_win_get_config(run_win).relative ~= '') == is_float
  then
    api.nvim_win_set_buf(run_win, buf) -- the window of the previous run shows this one
  elseif is_float then
    local width = math.max(40, math.floor(vim.o.columns * 0.8))
    local height = math.max(10, math.floor(vim.o.lines * 0.7))
    run_win = api.nvim_open_win(buf, true, {
      relative = 'editor',
      width = width,
      height = height,
      row = math.floor((vim.o.lines - height) / 2),
      col = math.floor((vim.o.columns - width) / 2),
      border = 'rounded',
      title = ' pi ',
    })
  else
    local prev = api.nvim_get_current_win()
    vim.cmd(view == 'vsplit' and 'botright vsplit' or 'botright split')
    run_win = api.nvim_get_current_win()
    api.nvim_win_set_buf(run_win, buf)
    api.nvim_set_current_win(prev)
  end
  set_window_options(run_win)
end

--- Create the run's buffer and show it.
--- @param run pi_bridge.Run
--- @param view string
function M.open(run, view)
  local buf = api.nvim_create_buf(false, true)
  run.buf = buf
  views[buf] = { text_open = false, thought_open = false, tools = {} }
  pcall(api.nvim_buf_set_name, buf, 'pi://' .. run.id)
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'markdown'
  with_modifiable(buf, function()
    api.nvim_buf_set_lines(buf, 0, -1, true, { header(run), '' })
  end)
  api.nvim_create_autocmd('BufWinEnter', {
    buffer = buf,
    callback = function()
      set_window_options(api.nvim_get_current_win())
    end,
  })
  open_window(buf, view)
end

local function valid(run)
  return run.buf and api.nvim_buf_is_valid(run.buf) and views[run.buf]
end

--- Rewrite the header with the run's status.
--- @param run pi_bridge.Run
function M.status(run)
  if not valid(run) or views[run.buf].header == false then
    return
  end
  with_modifiable(run.buf, function()
    api.nvim_buf_set_lines(run.buf, 0, 1, true, { header(run) })
  end)
end

local function append_text(buf, view, text)
  if text == '' then
    return
  end
  local parts = split_lines(text)
  if view.text_open then
    local last = api.nvim_buf_line_count(buf)
    parts[1] = api.nvim_buf_get_lines(buf, last - 1, last, true)[1] .. parts[1]
    api.nvim_buf_set_lines(buf, last - 1, last, true, parts)
  else
    append(buf, parts)
    view.text_open = true
  end
end

local function tool_summary(name, arguments)
  local args = arguments or {}
  local s = type(args.command) == 'string' and args.command
    or type(args.path) == 'string' and args.path
    or type(args.file_path) == 'string' and args.file_path
    or type(args.description) == 'string' and args.description -- a subagent's (Task)
    or vim.json.encode(args)
  s = s:gsub('\n', ' ')
  if #s > 80 then
    s = s:sub(1, 77) .. '...'
  end
  return ('%s%s: %s'):format(TOOL, name, s)
end

local function tool_line(tool, status)
  tool.status = status
  return ('%s%s  [%s]'):format(tool.child and BODY or '', tool.summary, status)
end

--- The lines of a plan: its head with how much is done, then each entry with its status icon.
--- @param entries table[] the contract's plan entries
--- @return string[]
function M.plan_lines(entries)
  local done = 0
  local lines = {}
  for _, e in ipairs(entries) do
    done = done + (e.status == 'completed' and 1 or 0)
    lines[#lines + 1] = ('  %s %s'):format(PLAN_ICONS[e.status] or '?', (tostring(e.content):gsub('\n', ' ')))
  end
  table.insert(lines, 1, ('%s · %d/%d done'):format(PLAN, done, #entries))
  return lines
end

--- `+N -M` of a diff (changed lines), or nil without both texts.
local function diff_counts(diff)
  if type(diff) ~= 'table' or type(diff.newText) ~= 'string' then
    return nil
  end
  local old = type(diff.oldText) == 'string' and diff.oldText or ''
  local added, removed = 0, 0
  local hunks = vim.diff(old, diff.newText, { result_type = 'indices' }) --[[@as integer[][] ]]
  for _, h in ipairs(hunks) do
    removed, added = removed + h[2], added + h[4]
  end
  return ('+%d -%d'):format(added, removed)
end

--- Insert `lines` before 0-based `row`: the marks of the line that was there (a tool's, the
--- plan's) move down with it (their left gravity would keep them on the first inserted line).
local function insert_at(buf, row, lines)
  local moved = api.nvim_buf_get_extmarks(buf, ns_tool, { row, 0 }, { row, 0 }, {})
  api.nvim_buf_set_lines(buf, row, row, true, lines)
  for _, m in ipairs(moved) do
    api.nvim_buf_set_extmark(buf, ns_tool, row + #lines, 0, vim.tbl_extend('force', MARK, { id = m[1] }))
  end
end

--- Replace the `count` lines from 0-based `start` with `lines`, line by line: nvim_buf_set_lines
--- over a range would drag the marks of the line after it (the next tool's, the plan's) into it.
local function replace_lines(buf, start, count, lines)
  local same = math.min(count, #lines)
  for i = 0, same - 1 do
    local old = api.nvim_buf_get_lines(buf, start + i, start + i + 1, true)[1]
    api.nvim_buf_set_text(buf, start + i, 0, start + i, #old, { lines[i + 1] })
  end
  if #lines > count then
    insert_at(buf, start + count, vim.list_slice(lines, count + 1))
  elseif #lines < count then
    api.nvim_buf_set_lines(buf, start + #lines, start + count, true, {})
  end
end

--- Replace the tool's status and folded output in place.
local function update_tool(buf, tool, status, output)
  local row = api.nvim_buf_get_extmark_by_id(buf, ns_tool, tool.mark, {})[1]
  if not row then
    return
  end
  replace_lines(buf, row, 1, { tool_line(tool, status) })
  if output == nil or tool.child then
    return -- a subagent's call is one line in its parent's fold
  end
  row = row + (tool.kids or 0) -- the output goes under the subagent's calls
  local lines = split_lines(output)
  if lines[#lines] == '' then
    lines[#lines] = nil
  end
  if #lines > MAX_OUTPUT_LINES then
    local more = #lines - MAX_OUTPUT_LINES
    lines = vim.list_slice(lines, 1, MAX_OUTPUT_LINES)
    lines[#lines + 1] = ('… %d more lines'):format(more)
  end
  replace_lines(buf, row + 1, tool.lines, body(lines))
  tool.lines = #lines
end

--- A token count the way the chat shows it: 950, 1.5k, 48k.
--- @param n number?
--- @return string?
function M.tokens(n)
  if type(n) ~= 'number' then
    return nil
  end
  if n < 1000 then
    return tostring(math.floor(n))
  elseif n < 10000 then
    return (('%.1f'):format(n / 1000):gsub('%.0$', '')) .. 'k'
  end
  return ('%dk'):format(math.floor(n / 1000 + 0.5))
end

--- The line of a finished compaction: "── Context compacted: 48k → 9k tokens".
--- @param content table session.compacted's content
--- @return string
function M.compacted_line(content)
  local before, after = M.tokens(content.tokensBefore), M.tokens(content.tokensAfter)
  if type(content.error) == 'string' then
    return '── Context not compacted: ' .. content.error
  elseif before and after then
    return ('── Context compacted: %s → %s tokens'):format(before, after)
  elseif before then
    return ('── Context compacted: %s tokens before'):format(before)
  end
  return '── Context compacted'
end

--- Draw one pi/message.
--- @param run pi_bridge.Run
--- @param msg table
function M.message(run, msg)
  if not valid(run) then
    return
  end
  local buf, view = run.buf, views[run.buf]
  local t, c = msg.type, msg.content or {}
  local follow_wins = followers(buf)
  with_modifiable(buf, function()
    if t == T.ASSISTANT then
      view.thought_open = false
      append_text(buf, view, c.text or '')
    elseif t == T.THOUGHT then
      view.text_open = false
      local lines = split_lines(c.text or '')
      if c.live and view.thought_open then
        -- a live fragment continues the last line of the thought
        local last = api.nvim_buf_line_count(buf)
        lines[1] = api.nvim_buf_get_lines(buf, last - 1, last, true)[1] .. lines[1]
        api.nvim_buf_set_lines(buf, last - 1, last, true, { lines[1] })
        append(buf, body(vim.list_slice(lines, 2)))
      else
        append(buf, vim.list_extend({ THOUGHT }, body(lines)))
        view.thought_open = c.live == true
      end
    elseif t == T.TOOL_CALL then
      view.text_open, view.thought_open = false, false
      local tool = { name = c.name, summary = tool_summary(c.name, c.arguments), lines = 0 }
      local parent = type(c.parentToolCallId) == 'string' and view.tools[c.parentToolCallId] or nil
      local prow = parent and api.nvim_buf_get_extmark_by_id(buf, ns_tool, parent.mark, {})[1]
      local row
      if prow then
        -- A subagent's call: one line folded under its parent's, after the calls before it.
        tool.child = true
        row = prow + 1 + (parent.kids or 0)
        insert_at(buf, row, { tool_line(tool, 'running') })
        parent.kids = (parent.kids or 0) + 1
      else
        row = append(buf, { tool_line(tool, 'running') })
      end
      tool.mark = api.nvim_buf_set_extmark(buf, ns_tool, row, 0, MARK)
      view.tools[c.toolCallId] = tool
    elseif t == T.PLAN then
      view.text_open, view.thought_open = false, false
      local lines = M.plan_lines(c.entries or {})
      local at = view.plan and api.nvim_buf_get_extmark_by_id(buf, ns_tool, view.plan.mark, {})[1]
      if at then
        replace_lines(buf, at, view.plan.lines, lines)
      else
        at = append(buf, lines)
        view.plan = { mark = api.nvim_buf_set_extmark(buf, ns_tool, at, 0, MARK) }
      end
      view.plan.lines = #lines
    elseif t == T.TOOL_UPDATE or t == T.TOOL_COMPLETED or t == T.TOOL_FAILED then
      local tool = view.tools[c.toolCallId]
      if tool then
        local status = t == T.TOOL_UPDATE and 'running'
          or c.cancelled and 'cancelled'
          or (tool.denied or c.reason == 'denied') and 'denied'
          or t == T.TOOL_COMPLETED and 'done'
          or 'failed'
        if t == T.TOOL_COMPLETED and type(c.diff) == 'table' then
          tool.diff = c.diff
          local counts = diff_counts(c.diff)
          if counts then
            tool.summary = tool.summary .. ' ' .. counts
          end
        end
        update_tool(buf, tool, status, t == T.TOOL_FAILED and c.error or c.output)
      end
    elseif t == T.PERMISSION_REQUESTED or t == T.PERMISSION_RESOLVED then
      local tool = view.tools[c.toolCallId]
      if tool then
        local status = WAITING
        if t == T.PERMISSION_RESOLVED then
          tool.denied = c.decision ~= 'allow'
          status = tool.denied and 'denied' or 'running'
        end
        update_tool(buf, tool, status, nil)
      end
    elseif t == T.RUN_QUEUED then
      append(
        buf,
        { ('⏸ waiting for a free run slot (position %d, limit %d)'):format(c.position, c.limit) }
      )
    elseif t == T.RUN_STEERED then
      view.text_open, view.thought_open = false, false
      append(buf, { ('➜ steered: %s'):format(c.text or '') })
    elseif t == T.RUN_RETRYING then
      view.text_open, view.thought_open = false, false
      append(buf, {
        ('↻ retrying (attempt %d in %d ms): %s'):format(c.attempt, c.delayMs, c.reason or ''),
      })
    elseif t == T.SESSION_COMPACTING then
      view.text_open, view.thought_open = false, false
      append(buf, { ('── compacting the context (%s)…'):format(c.reason or 'manual') })
    elseif t == T.SESSION_COMPACTED then
      view.text_open, view.thought_open = false, false
      append(buf, { M.compacted_line(c) })
    elseif t == T.SESSION_RENAMED then
      view.text_open, view.thought_open = false, false
      append(buf, { ('── renamed: %s'):format(c.title or '') })
    elseif protocol.terminal_status[t] then
      view.text_open, view.thought_open = false, false
      if t == T.TERMINAL_FAILED and c.error then
        append(buf, vim.list_extend({ '' }, split_lines(('✗ %s: %s'):format(c.error.kind, c.error.message or ''))))
        if c.error.kind == 'auth' then
          append(buf, M.first_run_lines())
        end
      end
    end
    if view.header ~= false then
      api.nvim_buf_set_lines(buf, 0, 1, true, { header(run) })
    end
  end)
  follow(buf, follow_wins)
end

--- Show an error that did not come as a message (a JSON-RPC error, the bridge exiting).
--- @param run pi_bridge.Run
--- @param text string
function M.error(run, text)
  if not valid(run) then
    return
  end
  with_modifiable(run.buf, function()
    append(run.buf, { '', '✗ ' .. text })
  end)
end

--- What a run refused for want of a key tells the user: what to set and where, and the
--- scripted model to try, in the words of :checkhealth pi_bridge (health.lua).
--- @return string[]
function M.first_run_lines()
  local lines = { 'pi has no model it can use: set a provider key, or try the scripted model.' }
  for _, advice in ipairs(require('pi_bridge.health').first_run_advice()) do
    lines[#lines + 1] = '  • ' .. advice
  end
  lines[#lines + 1] = '  • :checkhealth pi_bridge lists what is missing'
  return lines
end

--- "1.2 s", "850 ms", "2 min 5 s".
--- @param ns integer?
--- @return string?
function M.duration(ns)
  if not ns then
    return nil
  end
  local ms = ns / 1e6
  if ms < 1000 then
    return ('%d ms'):format(math.floor(ms + 0.5))
  elseif ms < 60000 then
    return ('%.1f s'):format(ms / 1000)
  end
  local secs = math.floor(ms / 1000 + 0.5)
  return ('%d min %d s'):format(math.floor(secs / 60), secs % 60)
end

--- The closing line of a run, in the user's terms: how it ended, how long it took, the tokens
--- and the cost; a stopped run's shutdown receipt is folded under it (`zo`).
--- @param run pi_bridge.Run
--- @return string[]
function M.footer(run)
  local took = M.duration(run.started_ns and run.ended_ns and (run.ended_ns - run.started_ns))
  local ended = ({
    completed = 'done',
    failed = 'failed',
    cancelled = 'stopped',
    error = 'failed',
  })[run.status] or run.status
  local parts = { '── ' .. ended .. (took and (' in ' .. took) or '') }
  local usage = run.usage
  if usage and (usage.input or usage.output) then
    parts[#parts + 1] = ('%s in / %s out tokens'):format(
      M.tokens(usage.input or 0) or '0',
      M.tokens(usage.output or 0) or '0'
    )
  end
  if usage and type(usage.cost) == 'number' then
    parts[#parts + 1] = ('$%.4f'):format(usage.cost)
  end
  local shutdown = run.shutdown
  if not shutdown then
    return { table.concat(parts, ' · ') }
  end
  parts[#parts + 1] = 'zo: receipt'
  local pids, survivors = #(shutdown.pids or {}), #(shutdown.survivors or {})
  local receipt = {
    ('stopped at the %s stage in %s'):format(
      shutdown.stage or '?',
      M.duration((shutdown.elapsedMs or 0) * 1e6)
    ),
    survivors == 0
        and (pids == 0 and 'no process of the run was left to stop' or ('%d process%s stopped, none left running'):format(
          pids,
          pids == 1 and '' or 'es'
        ))
      or ('%d of %d processes still running: %s'):format(
        survivors,
        pids,
        table.concat(vim.tbl_map(tostring, shutdown.survivors), ' ')
      ),
  }
  if shutdown.agentKept then
    receipt[#receipt + 1] = 'pi itself kept running for the next prompt of this conversation'
  end
  return vim.list_extend({ table.concat(parts, ' · ') }, body(receipt))
end

--- The run ended: final header and a closing line.
--- @param run pi_bridge.Run
function M.finish(run)
  if not valid(run) then
    return
  end
  local buf = run.buf
  local follow_wins = followers(buf)
  with_modifiable(buf, function()
    if views[buf].header ~= false then
      api.nvim_buf_set_lines(buf, 0, 1, true, { header(run) })
    end
    append(buf, vim.list_extend({ '' }, M.footer(run)))
  end)
  views[buf].text_open = false
  follow(buf, follow_wins)
end

return M
