--- Approvals: the bridge's `pi/requestPermission`, answered through `vim.ui.select`.
---
--- The bridge asks before a tool call runs (its edit, write or shell command). The prompt shows
--- the question on one line (the bridge's title: a long command keeps its tail, the cut marked
--- ` … `), then the WHOLE command, every line of it, and, for a file change, the lines it would
--- add and remove, so the user sees what they approve; the options are the bridge's own (Allow,
--- Always allow `<words>` in this workspace, Always allow `<words> *`, Deny, ...). No choice
--- (<Esc>) answers `cancelled`: the call does not run.
local protocol = require('pi_bridge.protocol')

local M = {}

--- Lines that show one request: the tool and its title (one line), the whole command or path
--- when the title does not hold it, then a short diff for a file change.
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
    local old = vim.split(type(diff.oldText) == 'string' and diff.oldText or '', '\n', { plain = true })
    local new = vim.split(type(diff.newText) == 'string' and diff.newText or '', '\n', { plain = true })
    local seen = {}
    for _, line in ipairs(old) do
      seen[line] = (seen[line] or 0) + 1
    end
    for _, line in ipairs(new) do
      if (seen[line] or 0) > 0 then
        seen[line] = seen[line] - 1
      elseif line ~= '' then
        lines[#lines + 1] = '  + ' .. line
      end
    end
    for line, left in pairs(seen) do
      if left > 0 and line ~= '' then
        lines[#lines + 1] = '  - ' .. line
      end
    end
  end
  return lines
end

--- The handler of `pi/requestPermission` (a vim.lsp server-request handler; Neovim runs it in a
--- coroutine, so the answer waits for the user's choice).
function M.on_request(_, params, _)
  if type(params) ~= 'table' or type(params.options) ~= 'table' then
    return { outcome = 'cancelled' }
  end
  local lines = M.describe(params)
  local choice, waited = require('pi_bridge.ask').await(function(done)
    vim.ui.select(params.options, {
      prompt = table.concat(lines, '\n'),
      kind = 'pi_bridge_permission',
      format_item = function(option)
        return option.name
      end,
    }, done)
  end)
  if not waited then
    return { outcome = 'cancelled' } -- nothing can wait for the user here
  end
  if type(choice) ~= 'table' or type(choice.optionId) ~= 'string' then
    return { outcome = 'cancelled' }
  end
  return { optionId = choice.optionId }
end

--- Client capabilities that tell the bridge this plugin answers `pi/requestPermission` and
--- `pi/ask` (ask.lua).
function M.capabilities()
  local capabilities = vim.lsp.protocol.make_client_capabilities()
  capabilities.experimental = capabilities.experimental or {}
  capabilities.experimental.piBridge = { permissions = true, questions = true }
  return capabilities
end

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
  require('pi_bridge.client').request(protocol.SET_MODE, params, function(err, result)
    if not err and type(result) == 'table' and type(result.mode) == 'string' then
      require('pi_bridge.chat').mode_set(result.sessionId, result.mode) -- the statusline's mode
    end
    done(err, result)
  end)
end

--- `:PiPermissions`: list the workspace's rules and remove the one picked.
--- @param cwd string
function M.manage_rules(cwd)
  local client = require('pi_bridge.client')
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
