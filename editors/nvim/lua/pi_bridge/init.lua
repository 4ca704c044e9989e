--- pi-bridge for Neovim: `setup(opts)` and the entry points behind the user commands.
---
--- The plugin is configuration plus handlers: `client` owns the one LSP client per Neovim,
--- `handlers` turns `pi/message` notifications into run state, `render` draws a run's buffer.
local protocol = require('pi_bridge.protocol')

local M = {}

local function default_log_file()
  local ok, dir = pcall(vim.fn.stdpath, 'log')
  if not ok or type(dir) ~= 'string' then
    dir = vim.fn.stdpath('cache') --[[@as string]]
  end
  return dir .. '/pi_bridge.log'
end

--- @class pi_bridge.Config
--- @field cmd string[] How to start the bridge (argv, never through a shell).
--- @field cmd_env table<string,string>? Extra environment of the bridge process.
--- @field cmd_cwd string? Working directory of the bridge process.
--- @field pi_command string|string[]|nil Which pi the bridge runs: a string is passed as
---   $PI_BRIDGE_PI_COMMAND (shell-style, split by the bridge), a list as
---   `initializationOptions.piCommand`.
--- @field provider string? pi's --provider for every run.
--- @field model string? pi's --model for every run.
--- @field thinking string? pi's --thinking for every run (off, minimal, low, medium, high, xhigh).
--- @field tools string[]? pi's --tools; an empty list means no tools.
--- @field live_thoughts boolean Stream thoughts as they come instead of at the end of the turn.
--- @field init_options table Extra `initializationOptions`, camelCase as on the wire.
--- @field view 'split'|'vsplit'|'float'|'none' Where a run is shown.
--- @field log_file string|false The bridge logs here ($PI_BRIDGE_LOG_FILE; false: to its stderr,
---   which vim.lsp writes to its own log).
--- @field chat_layout 'split'|'vsplit' Where :PiChat opens the chat.
--- @field models string[] "provider/model" entries :PiModel offers (besides typing one).
--- @field sessions_limit integer How many sessions :PiSessions lists.
--- @field slash_complete boolean `/` at the start of the prompt area opens the completion of the
---   conversation's commands (its 'omnifunc' completes them either way: i_CTRL-X_CTRL-O).
--- @field keys pi_bridge.Keys Keys of the chat and the diff; a key set to false is not mapped.
--- @field sandbox pi_bridge.Sandbox How the agent's commands are confined (bubblewrap): `mode`
---   off, workspace-write or read-only, `network` on or off; :PiSandbox changes it per Neovim.

--- @class pi_bridge.Keys
--- @field send string|string[]|false normal mode, chat and prompt: send (steers while a run goes)
--- @field send_insert string|string[]|false insert mode, prompt: send
--- @field stop string|string[]|false normal mode, chat and prompt: stop the run
--- @field stop_insert string|string[]|false insert mode, prompt: stop the run
--- @field steer string|string[]|false normal mode: steer the run with the prompt
--- @field model string|string[]|false normal mode: :PiModel
--- @field new string|string[]|false normal mode: :PiNew
--- @field next_turn string|string[]|false normal mode, chat: next turn
--- @field prev_turn string|string[]|false normal mode, chat: previous turn
--- @field diff string|string[]|false normal mode, chat: :PiDiff on an edit line
--- @field diff_revert string|false in the diff: write the file's old text back
--- @field diff_close string|false in the diff: close its tab

--- @type pi_bridge.Config
local defaults = {
  cmd = { 'pi-bridge' },
  cmd_env = nil,
  cmd_cwd = nil,
  pi_command = nil,
  provider = nil,
  model = nil,
  thinking = nil,
  tools = nil,
  live_thoughts = false,
  init_options = {},
  view = 'split',
  log_file = default_log_file(),
  chat_layout = 'vsplit',
  models = {},
  sessions_limit = 50,
  slash_complete = true,
  sandbox = { mode = 'off', network = false },
  keys = {
    send = '<CR>',
    send_insert = '<C-s>',
    stop = { 'q', '<C-c>' },
    stop_insert = '<C-c>',
    steer = 'gs',
    model = 'ga',
    new = 'gn',
    next_turn = ']]',
    prev_turn = '[[',
    diff = 'gd',
    diff_revert = 'gR',
    diff_close = 'q',
  },
}

local function list_of_strings(v)
  if type(v) ~= 'table' then
    return false
  end
  for _, s in ipairs(v) do
    if type(s) ~= 'string' then
      return false
    end
  end
  return #v == vim.tbl_count(v)
end

--- A key option: a key, a non-empty list of keys, or false (not mapped).
local function key_spec(v)
  return v == false or (type(v) == 'string' and v ~= '') or (list_of_strings(v) and #v > 0)
end

local function one_of(values)
  return function(v)
    return vim.tbl_contains(values, v)
  end
end

--- Validators per option: { validator, optional, message }.
local schema = {
  cmd = {
    function(v)
      return list_of_strings(v) and #v > 0
    end,
    false,
    'non-empty list of strings',
  },
  cmd_env = { 'table', true },
  cmd_cwd = { 'string', true },
  pi_command = {
    function(v)
      return v == nil or (type(v) == 'string' and v ~= '') or (list_of_strings(v) and #v > 0)
    end,
    true,
    'string or non-empty list of strings',
  },
  provider = { 'string', true },
  model = { 'string', true },
  thinking = {
    function(v)
      return v == nil or vim.tbl_contains(protocol.THINKING_LEVELS, v)
    end,
    true,
    table.concat(protocol.THINKING_LEVELS, '|'),
  },
  tools = {
    function(v)
      return v == nil or list_of_strings(v)
    end,
    true,
    'list of strings',
  },
  live_thoughts = { 'boolean', false },
  init_options = { 'table', false },
  view = { one_of({ 'split', 'vsplit', 'float', 'none' }), false, 'split|vsplit|float|none' },
  log_file = {
    function(v)
      return v == false or (type(v) == 'string' and v ~= '')
    end,
    false,
    'path or false',
  },
  chat_layout = { one_of({ 'split', 'vsplit' }), false, 'split|vsplit' },
  models = { list_of_strings, false, 'list of "provider/model" strings' },
  sessions_limit = {
    function(v)
      return type(v) == 'number' and v >= 1 and v <= 1000 and v == math.floor(v)
    end,
    false,
    'integer 1..1000',
  },
  slash_complete = { 'boolean', false },
  sandbox = {
    function(v)
      if type(v) ~= 'table' then
        return false
      end
      for name in pairs(v) do
        if name ~= 'mode' and name ~= 'network' then
          return false
        end
      end
      return (v.mode == nil or vim.tbl_contains(protocol.SANDBOX_MODES, v.mode))
        and (v.network == nil or type(v.network) == 'boolean')
    end,
    false,
    ('{ mode = %s, network = boolean }'):format(table.concat(protocol.SANDBOX_MODES, '|')),
  },
  keys = {
    function(v)
      if type(v) ~= 'table' then
        return false
      end
      for name, lhs in pairs(v) do
        if defaults.keys[name] == nil or not key_spec(lhs) then
          return false
        end
      end
      return true
    end,
    false,
    'table of known key names (see :help pi_bridge-keys) to a key, a list of keys or false',
  },
}

--- vim.validate's signature changed in 0.11 (the table form is deprecated there).
local function validate(name, value, spec)
  if vim.fn.has('nvim-0.11') == 1 then
    vim.validate(name, value, spec[1], spec[2], spec[3])
  else
    vim.validate({ [name] = { value, spec[1], spec[3] or spec[2] } })
  end
end

--- @type pi_bridge.Config?
local config

--- Configure the plugin. Unknown or invalid options are reported and replaced by their default;
--- setup never throws for a bad option.
--- @param opts table?
function M.setup(opts)
  opts = opts or {}
  local cfg = vim.deepcopy(defaults)
  local problems = {}
  for key, value in pairs(opts) do
    local spec = schema[key]
    if not spec then
      problems[#problems + 1] = ('unknown option %q'):format(tostring(key))
    else
      local ok, err = pcall(validate, key, value, spec)
      if ok and (key == 'keys' or key == 'sandbox') then
        cfg[key] = vim.tbl_extend('force', cfg[key], vim.deepcopy(value))
      elseif ok then
        cfg[key] = vim.deepcopy(value)
      else
        problems[#problems + 1] = tostring(err):gsub('^.-:%d+: ', '')
      end
    end
  end
  if #problems > 0 then
    vim.notify(
      'pi_bridge.setup: ' .. table.concat(problems, '; ') .. ' (defaults used)',
      vim.log.levels.WARN
    )
  end
  config = cfg
end

--- The configuration in force (the defaults if setup() was never called). A `cmd` starting with
--- `pi-bridge` runs the plugin's own venv once the build step made it (pi_bridge.install).
--- @return pi_bridge.Config
function M.config()
  if not config then
    M.setup({})
  end
  local cfg = vim.deepcopy(config) --[[@as pi_bridge.Config]]
  cfg.cmd = require('pi_bridge.install').resolve_cmd(cfg.cmd)
  return cfg
end

local run_counter = 0

local function new_run_id()
  run_counter = run_counter + 1
  return ('nvim-%d-%d-%d'):format(vim.fn.getpid(), os.time(), run_counter)
end

--- Send pi/run with `params` (a runId is added when absent); `sink` draws it instead of a pi://
--- buffer (see handlers.start_run).
--- @param params table
--- @param sink table?
--- @return string run_id
function M.start(params, sink)
  params.runId = params.runId or new_run_id()
  local run = require('pi_bridge.handlers').start_run(params, M.config().view, sink)
  require('pi_bridge.client').request(protocol.RUN, params, function(err, result)
    require('pi_bridge.handlers').on_run_response(run, err, result)
  end, function(request_id)
    run.request_id = request_id
  end)
  return params.runId
end

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
    runId = new_run_id(),
    cwd = vim.fn.getcwd(),
    provider = cfg.provider,
    model = cfg.model,
    thinking = cfg.thinking,
    tools = cfg.tools,
    liveThoughts = cfg.live_thoughts or nil,
    sandbox = require('pi_bridge.sandbox').run_param(),
  }
  params = vim.tbl_extend('force', params, overrides or {})
  return M.start(params)
end

--- The statusline text of the chat: model, permission mode, sandbox, running or idle, context %
--- (for lualine: `sections = { lualine_x = { require('pi_bridge').status } }`; refresh on the
--- `User PiBridgeRunStarted` / `PiBridgeRunFinished` autocmds).
--- @return string
function M.status()
  return require('pi_bridge.chat').status()
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

--- Cancel a run (default: the most recent live one) through `pi/cancel`.
--- @param run_id string?
--- @param on_done fun(err: table?, result: table?)?
function M.cancel(run_id, on_done)
  local handlers = require('pi_bridge.handlers')
  local run = run_id and handlers.get(run_id) or handlers.latest_live()
  if not run or run.done then
    vim.notify('pi_bridge: no live run' .. (run_id and (' ' .. run_id) or ''), vim.log.levels.INFO)
    return
  end
  handlers.cancelling(run)
  require('pi_bridge.client').request(protocol.CANCEL, { runId = run.id }, function(err, result)
    handlers.on_cancel_response(run, err, result)
    if on_done then
      on_done(err, result)
    end
  end)
end

--- Ids of the live runs (for command completion).
--- @return string[]
function M.live_run_ids()
  return vim.tbl_map(function(run)
    return run.id
  end, require('pi_bridge.handlers').live())
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
