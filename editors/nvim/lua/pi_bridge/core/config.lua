--- The configuration: setup's options, their defaults and validation, and the one in force.
local install = require('pi_bridge.core.install')
local protocol = require('pi_bridge.core.protocol')

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
function M.get()
  if not config then
    M.setup({})
  end
  local cfg = vim.deepcopy(config) --[[@as pi_bridge.Config]]
  cfg.cmd = install.resolve_cmd(cfg.cmd)
  return cfg
end

return M
