--- Approvals: the bridge's `pi/requestPermission`, answered through `vim.ui.select`.
---
--- The bridge asks before a tool call runs (its edit, write or shell command). The prompt shows
--- the question on one line (the bridge's title: a long command keeps its tail, the cut marked
--- ` … `), then the WHOLE command, every line of it, and, for a file change, the lines it would
--- add and remove, so the user sees what they approve; the options are the bridge's own (Allow,
--- Always allow `<words>` in this workspace, Always allow `<words> *`, Deny, ...). No choice
--- (<Esc>) answers `cancelled`: the call does not run.
local handlers = require('pi_bridge.core.handlers')
local protocol = require('pi_bridge.core.protocol')

local M = {}

--- Lines that show one request: the tool and its title (one line), the whole command or path
--- when the title does not hold it, then, for a file change, the lines it would remove (`-`) and
--- add (`+`), hunk by hunk, as a diff reads.
--- @param params table pi/requestPermission params
--- @return string[]
function M.describe(params)
  local title = type(params.title) == 'string' and params.title or ''
  local lines = { ('pi asks to run %s: %s'):format(params.tool or '?', title) }
  local whole = type(params.command) == 'string' and params.command
    or type(params.path) == 'string' and params.path
    or nil
  if whole and whole ~= title then
    for _, line in ipairs(vim.split(whole, '\n', { plain = true })) do
      lines[#lines + 1] = '  ' .. line
    end
  end
  local diff = params.diff
  if type(diff) == 'table' then
    lines[#lines + 1] = ('  %s'):format(diff.path or '')
    local old_text = type(diff.oldText) == 'string' and diff.oldText or ''
    local new_text = type(diff.newText) == 'string' and diff.newText or ''
    local old = vim.split(old_text, '\n', { plain = true })
    local new = vim.split(new_text, '\n', { plain = true })
    local hunks = vim.diff(old_text, new_text, { result_type = 'indices' }) --[[@as integer[][] ]]
    for _, h in ipairs(hunks) do
      local old_start, old_count, new_start, new_count = h[1], h[2], h[3], h[4]
      for i = old_start, old_start + old_count - 1 do
        lines[#lines + 1] = '  - ' .. (old[i] or '')
      end
      for i = new_start, new_start + new_count - 1 do
        lines[#lines + 1] = '  + ' .. (new[i] or '')
      end
    end
  end
  return lines
end

--- The extra choice that opens the proposed change in diff mode before deciding.
local OPEN_DIFF = { optionId = false, name = 'Open the diff first (then answer here)' }

local function is_reject(option)
  return type(option) == 'table'
    and (option.kind == 'reject_once' or option.kind == 'reject_always')
end

--- The handler of `pi/requestPermission` (a vim.lsp server-request handler; Neovim runs it in a
--- coroutine, so the answer waits for the user's choice). A file change offers its diff first; a
--- Deny asks why (optional: the reason goes to the model).
function M.on_request(_, params, _)
  if type(params) ~= 'table' or type(params.options) ~= 'table' then
    return { outcome = 'cancelled' }
  end
  local ask = require('pi_bridge.ui.ask')
  -- Let the run's permission.requested message (sent beside this request) draw first, so the
  -- thread behind the question shows the call [waiting for you]; a short, bounded wait.
  local run = type(params.runId) == 'string' and handlers.get(params.runId)
  for _ = 1, 25 do
    local seen = not run
      or vim.iter(run.messages):any(function(m)
        return m.type == 'permission.requested'
          and type(m.content) == 'table'
          and m.content.toolCallId == params.toolCallId
      end)
    if seen then
      break
    end
    local _, can_wait = ask.await(function(done)
      vim.defer_fn(function()
        done(nil)
      end, 20)
    end)
    if not can_wait then
      break
    end
  end
  pcall(vim.cmd.redraw)
  local lines = M.describe(params)
  local items = vim.deepcopy(params.options)
  if type(params.diff) == 'table' and type(params.diff.path) == 'string' then
    items[#items + 1] = OPEN_DIFF
  end
  local choice, waited
  while true do
    choice, waited = ask.await(function(done)
      vim.ui.select(items, {
        prompt = table.concat(lines, '\n'),
        kind = 'pi_bridge_permission',
        format_item = function(option)
          return option.name
        end,
      }, done)
    end)
    if not waited or type(choice) ~= 'table' or choice.optionId ~= false then
      break
    end
    require('pi_bridge.ui.diff').open_proposed(params.diff)
  end
  if not waited then
    return { outcome = 'cancelled' } -- nothing can wait for the user here
  end
  if type(choice) ~= 'table' or type(choice.optionId) ~= 'string' then
    return { outcome = 'cancelled' }
  end
  local answer = { optionId = choice.optionId }
  if is_reject(choice) then
    local reason = ask.await(function(done)
      vim.ui.input({ prompt = 'Why not? (pi is told; empty: no reason) ' }, done)
    end)
    if type(reason) == 'string' and vim.trim(reason) ~= '' then
      answer.message = vim.trim(reason)
    end
  end
  return answer
end

--- The chat's view of the permission mode, registered by the chat (it holds the conversation):
--- `get()` the current mode, `set(session_id, mode)` after pi/setMode answered.
M.mode_hooks = {
  get = function()
    return nil
  end,
  set = function(_, _) end,
}

--- `:PiMode {mode}`: the mode of the chat's conversation from its next tool call.
--- @param session_id string?
--- @param mode string
--- @param done fun(err: table?, result: table?)?
function M.set_mode(session_id, mode, done)
  done = done or function(err, result)
    if err then
      vim.notify('pi_bridge: ' .. (err.message or 'pi/setMode failed'), vim.log.levels.ERROR)
    else
      vim.notify(('pi_bridge: mode %s'):format(result.mode), vim.log.levels.INFO)
    end
  end
  if not session_id then
    done({ message = 'no conversation yet: send a prompt first' }, nil)
    return
  end
  local params = { sessionId = session_id, mode = mode }
  require('pi_bridge.core.client').request(protocol.SET_MODE, params, function(err, result)
    if not err and type(result) == 'table' and type(result.mode) == 'string' then
      M.mode_hooks.set(result.sessionId, result.mode) -- the statusline's mode
    end
    done(err, result)
  end)
end

--- What each mode does, as the picker shows it.
M.MODE_HELP = {
  ask = 'asks before each edit, write and command',
  ['auto-edit'] = 'edits files in the project without asking, asks before commands',
  plan = 'reads only: edits, writes and commands are refused',
  full = 'runs everything without asking',
}

--- `:PiMode` without an argument: pick the mode with `vim.ui.select`, the current one marked.
--- @param session_id string?
--- @param done fun(err: table?, result: table?)?
function M.pick_mode(session_id, done)
  local current = M.mode_hooks.get()
  vim.ui.select(protocol.MODES, {
    prompt = 'pi: permission mode of this conversation',
    kind = 'pi_bridge.mode',
    format_item = function(mode)
      local mark = mode == current and '● ' or '  '
      return ('%s%s — %s'):format(mark, mode, M.MODE_HELP[mode] or '')
    end,
  }, function(mode)
    if mode then
      M.set_mode(session_id, mode, done)
    end
  end)
end

--- `:PiPermissions`: list the workspace's rules and remove the one picked.
--- @param cwd string
function M.manage_rules(cwd)
  local client = require('pi_bridge.core.client')
  client.request(protocol.PERMISSIONS, { cwd = cwd }, function(err, result)
    if err then
      vim.notify('pi_bridge: ' .. (err.message or 'pi/permissions failed'), vim.log.levels.ERROR)
      return
    end
    local rules = result.rules or {}
    if #rules == 0 then
      vim.notify('pi_bridge: no permission rules for ' .. cwd, vim.log.levels.INFO)
      return
    end
    vim.ui.select(rules, {
      prompt = 'Remove which rule?',
      format_item = function(rule)
        -- A rule shown as wide as it is: a prefix rule ends ` *`, an exact one does not.
        local match = rule.match.command and table.concat(rule.match.command, ' ')
          or rule.match.commandPrefix and (table.concat(rule.match.commandPrefix, ' ') .. ' *')
          or rule.match.path
        return ('%s %s %s (%s)'):format(rule.decision, rule.tool, match, rule.scope)
      end,
    }, function(choice)
      if not choice then
        return
      end
      local kept = vim.tbl_filter(function(rule)
        return rule.id ~= choice.id
      end, rules)
      client.request(protocol.SET_PERMISSIONS, { cwd = cwd, rules = kept }, function(set_err)
        if set_err then
          vim.notify('pi_bridge: ' .. (set_err.message or 'failed'), vim.log.levels.ERROR)
        end
      end)
    end)
  end)
end

return M
