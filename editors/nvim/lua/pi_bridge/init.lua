--- pi-bridge for Neovim: `setup(opts)` and the entry points behind the user commands.
---
--- The composition root: `core` (config, client, handlers) knows no UI; loading this module
--- registers the UI (`pi_bridge.ui`) on core, then these functions drive both.
local config = require('pi_bridge.core.config')
local handlers = require('pi_bridge.core.handlers')
require('pi_bridge.ui')

local M = {}

M.setup = config.setup
M.config = config.get

M.start = handlers.start
M.cancel = handlers.cancel

--- Start a one-shot run in its own pi:// buffer. `overrides` may set any pi/run param (camelCase)
--- for this run only.
--- @param prompt string
--- @param overrides table?
--- @return string? run_id
function M.run(prompt, overrides)
  if type(prompt) ~= 'string' or vim.trim(prompt) == '' then
    vim.notify('pi_bridge: empty prompt', vim.log.levels.WARN)
    return nil
  end
  local cfg = M.config()
  local params = {
    prompt = prompt,
    runId = handlers.new_run_id(),
    cwd = vim.fn.getcwd(),
    provider = cfg.provider,
    model = cfg.model,
    thinking = cfg.thinking,
    tools = cfg.tools,
    liveThoughts = cfg.live_thoughts or nil,
    sandbox = require('pi_bridge.core.sandbox').run_param(),
  }
  params = vim.tbl_extend('force', params, overrides or {})
  return M.start(params)
end

--- The statusline text of the chat: model, permission mode, sandbox, running or idle, context %
--- (for lualine: `sections = { lualine_x = { require('pi_bridge').status } }`; refresh on the
--- `User PiBridgeRunStarted` / `PiBridgeRunFinished` autocmds).
--- @return string
function M.status()
  return require('pi_bridge.ui.chat').status()
end

--- Ask about lines line1..line2 of the current buffer; `instruction` defaults to an explanation.
--- @param line1 integer
--- @param line2 integer
--- @param instruction string?
--- @return string? run_id
function M.run_selection(line1, line2, instruction, overrides)
  local buf = vim.api.nvim_get_current_buf()
  local lines = vim.api.nvim_buf_get_lines(buf, line1 - 1, line2, false)
  local name = vim.api.nvim_buf_get_name(buf)
  name = name ~= '' and vim.fn.fnamemodify(name, ':~:.') or '[No Name]'
  if not instruction or vim.trim(instruction) == '' then
    instruction = 'Explain this code.'
  end
  local prompt = ('%s\n\nFrom %s, lines %d-%d:\n```%s\n%s\n```'):format(
    instruction,
    name,
    line1,
    line2,
    vim.bo[buf].filetype,
    table.concat(lines, '\n')
  )
  return M.run(prompt, overrides)
end

--- Ids of the live runs (for command completion).
--- @return string[]
function M.live_run_ids()
  return vim.tbl_map(function(run)
    return run.id
  end, handlers.live())
end

--- Open the bridge's log (its stderr) in a split.
function M.open_log()
  local file = M.config().log_file
  if not file then
    file = vim.lsp.get_log_path()
  end
  if vim.fn.filereadable(file) == 0 then
    vim.notify('pi_bridge: no log yet at ' .. file, vim.log.levels.INFO)
    return
  end
  vim.cmd('botright split ' .. vim.fn.fnameescape(file))
  vim.bo.autoread = true
  vim.bo.readonly = true
  vim.cmd('normal! G')
end

return M
