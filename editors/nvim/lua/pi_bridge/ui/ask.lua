--- The agent's own dialogs: the bridge's `pi/ask` (a pi extension asks its user), answered
--- through `vim.ui.select` (select, confirm) and `vim.ui.input` (input, editor).
---
--- No choice (<Esc>) answers `cancelled`: the extension decides what that means (pi's permission
--- gate example blocks the call). The bridge withdraws the question when the run is cancelled or
--- the dialog's own timeout passes; the answer given after that is ignored.
local M = {}

local YES, NO = 'Yes', 'No'

--- Wait, in the handler's coroutine, for `start(done)` to call `done(value)`.
--- @param start fun(done: fun(value: any))
--- @return any value, boolean waited (false: not in a coroutine, nothing can wait)
function M.await(start)
  local co, is_main = coroutine.running()
  if not co or is_main then
    return nil, false
  end
  start(function(value)
    vim.schedule(function()
      coroutine.resume(co, value)
    end)
  end)
  return coroutine.yield(), true
end

local function prompt_of(params)
  local title = type(params.title) == 'string' and params.title or ''
  local message = type(params.message) == 'string' and params.message or ''
  return message ~= '' and (title .. '\n' .. message) or title
end

local function select(params)
  local options = vim.tbl_filter(function(option)
    return type(option) == 'string'
  end, type(params.options) == 'table' and params.options or {})
  local choice = M.await(function(done)
    vim.ui.select(options, { prompt = prompt_of(params), kind = 'pi_bridge_ask' }, done)
  end)
  return type(choice) == 'string' and { value = choice } or { cancelled = true }
end

local function confirm(params)
  local choice = M.await(function(done)
    vim.ui.select({ YES, NO }, { prompt = prompt_of(params), kind = 'pi_bridge_ask' }, done)
  end)
  if choice == nil then
    return { cancelled = true }
  end
  return { confirmed = choice == YES }
end

local function input(params)
  local default = params.kind == 'editor' and params.prefill or nil
  local text = M.await(function(done)
    vim.ui.input({
      prompt = prompt_of(params) .. ': ',
      default = type(default) == 'string' and default or nil,
    }, done)
  end)
  return type(text) == 'string' and { value = text } or { cancelled = true }
end

local by_kind = { select = select, confirm = confirm, input = input, editor = input }

--- The handler of `pi/ask` (a vim.lsp server-request handler; Neovim runs it in a coroutine).
function M.on_ask(_, params, _)
  local answer = type(params) == 'table' and by_kind[params.kind]
  if not answer or not coroutine.running() then
    return { cancelled = true }
  end
  return answer(params)
end

return M
