--- The one pi-bridge LSP client of this Neovim: start it on first use, send requests once initialized.
---
--- The transport knows no UI: whoever answers the server's notifications and requests registers
--- here (handle, on_start, on_exit) before the client starts.
local config = require('pi_bridge.core.config')
local protocol = require('pi_bridge.core.protocol')

local M = {}

local NAME = 'pi_bridge'

--- @type integer?
local client_id
--- Requests waiting for the client to finish `initialize`.
--- @type fun(client: vim.lsp.Client?, err: string?)[]
local pending = {}

local has_011 = vim.fn.has('nvim-0.11') == 1

--- Handlers of the server's notifications and requests, by method (vim.lsp handler signature).
--- @type table<string, function>
local methods = {}
--- Called with the client id once the client process is started.
--- @type fun(id: integer)[]
local start_listeners = {}
--- Called with (code, signal) when the client exits.
--- @type fun(code: integer, signal: integer)[]
local exit_listeners = {}

--- Answer the server's notification or request `method` with `fn` (vim.lsp handler signature).
--- @param method string
--- @param fn function
function M.handle(method, fn)
  methods[method] = fn
end

--- Call `fn(id)` each time the client process starts.
--- @param fn fun(id: integer)
function M.on_start(fn)
  start_listeners[#start_listeners + 1] = fn
end

--- Call `fn(code, signal)` each time the client exits.
--- @param fn fun(code: integer, signal: integer)
function M.on_exit(fn)
  exit_listeners[#exit_listeners + 1] = fn
end

--- The id of the running client, if any.
--- @return integer?
function M.id()
  return client_id
end

--- Client capabilities: what vim.lsp declares, and whether `pi/requestPermission` and `pi/ask`
--- are answered here (their handlers are registered).
--- @return table
function M.capabilities()
  local capabilities = vim.lsp.protocol.make_client_capabilities()
  capabilities.experimental = capabilities.experimental or {}
  capabilities.experimental.piBridge = {
    permissions = methods[protocol.REQUEST_PERMISSION] ~= nil,
    questions = methods[protocol.ASK] ~= nil,
  }
  return capabilities
end

--- Call a method of vim.lsp.Client: methods take `self` from 0.11 on, closures before.
local function call(client, method, ...)
  if has_011 then
    return client[method](client, ...)
  end
  return client[method](...)
end

local function flush(client, err)
  local waiting = pending
  pending = {}
  for _, fn in ipairs(waiting) do
    fn(client, err)
  end
end

--- Environment of the bridge: cmd_env, plus the contract's PI_BRIDGE_PI_COMMAND for a string
--- pi_command and the bridge's PI_BRIDGE_LOG_FILE (env rather than flags: flags would have to come
--- before a subcommand in a user's cmd).
--- @param cfg pi_bridge.Config
--- @return table<string,string>?
function M.cmd_env(cfg)
  local env = vim.deepcopy(cfg.cmd_env or {})
  if type(cfg.pi_command) == 'string' then
    env.PI_BRIDGE_PI_COMMAND = cfg.pi_command
  end
  if cfg.log_file then
    vim.fn.mkdir(vim.fn.fnamemodify(cfg.log_file, ':h'), 'p')
    env.PI_BRIDGE_LOG_FILE = cfg.log_file
  end
  return next(env) and env or nil
end

--- `initializationOptions` of `initialize`.
--- @param cfg pi_bridge.Config
--- @return table
function M.init_options(cfg)
  local opts = vim.deepcopy(cfg.init_options)
  if type(cfg.pi_command) == 'table' then
    opts.piCommand = cfg.pi_command
  end
  if next(opts) == nil then
    return vim.empty_dict() -- an empty Lua table would be sent as [] (the bridge wants an object)
  end
  return opts
end

--- The bridge's `initialize` answer (capabilities.experimental.piBridge: its agents,
--- defaultAgent, settings) once the client is initialized; empty before.
M.bridge = {}

--- The running client, if any.
--- @return vim.lsp.Client?
function M.get()
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if not client then
    return nil
  end
  if call(client, 'is_stopped') then
    return nil
  end
  return client
end

--- Start the client unless it runs; `fn(client)` is called once it is initialized, or
--- `fn(nil, err)` when it cannot start.
--- @param fn fun(client: vim.lsp.Client?, err: string?)
function M.with_client(fn)
  local client = M.get()
  if client and client.initialized then
    fn(client)
    return
  end
  pending[#pending + 1] = fn
  if client then
    return -- initialize is in flight
  end

  local cfg = config.get()
  if vim.fn.executable(cfg.cmd[1]) == 0 then
    flush(
      nil,
      ('bridge command not executable: %s (see :checkhealth pi_bridge)'):format(cfg.cmd[1])
    )
    return
  end
  local lsp_config = {
    name = NAME,
    cmd = cfg.cmd,
    cmd_cwd = cfg.cmd_cwd,
    cmd_env = M.cmd_env(cfg),
    root_dir = vim.fn.getcwd(),
    init_options = M.init_options(cfg),
    handlers = vim.tbl_extend('force', {}, methods),
    capabilities = M.capabilities(),
    -- No flags.exit_timeout: on VimLeavePre, Neovim 0.11 would then always wait that long before
    -- killing the client. Without it Neovim sends shutdown and exits; the closed stdin makes the
    -- bridge stop every live run (its whole process tree) by itself.
    on_init = function(c, result)
      local info = result and result.capabilities and result.capabilities.experimental
      local pib = info and info.piBridge
      M.bridge = type(pib) == 'table' and pib or {}
      if not pib or pib.protocolVersion ~= protocol.PROTOCOL_VERSION then
        vim.notify(
          ('pi_bridge: server speaks protocolVersion %s, this plugin %d'):format(
            pib and tostring(pib.protocolVersion) or '?',
            protocol.PROTOCOL_VERSION
          ),
          vim.log.levels.WARN
        )
      end
      vim.schedule(function()
        flush(c)
      end)
    end,
    on_exit = function(code, signal, id)
      vim.schedule(function()
        if id == client_id then
          client_id = nil
        end
        flush(nil, ('bridge exited (code %s, signal %s) before it was ready'):format(code, signal))
        for _, fn in ipairs(exit_listeners) do
          fn(code, signal)
        end
      end)
    end,
  }
  local id
  if has_011 then
    id = vim.lsp.start(lsp_config, {
      attach = false,
      silent = true,
      reuse_client = function()
        return false -- one client per Neovim, tracked here
      end,
    })
  else
    id = vim.lsp.start_client(lsp_config)
  end
  if not id then
    flush(nil, 'could not start the bridge: ' .. table.concat(cfg.cmd, ' '))
    return
  end
  client_id = id
  for _, fn in ipairs(start_listeners) do
    fn(id)
  end
end

--- Send a request once the client is ready. `handler(err, result)` gets the response; it is not
--- called for a -32800 answer (vim.lsp drops those), see core/handlers.lua.
--- @param method string
--- @param params table
--- @param handler fun(err: table?, result: any)
--- @param on_sent fun(request_id: integer)?
function M.request(method, params, handler, on_sent)
  M.with_client(function(client, start_err)
    if not client then
      handler({ code = -32603, message = start_err or 'no client' }, nil)
      return
    end
    local ok, request_id = call(client, 'request', method, params, function(err, result)
      handler(err, result)
    end)
    if not ok then
      handler({ code = -32603, message = 'the bridge is not running' }, nil)
    elseif on_sent then
      on_sent(request_id)
    end
  end)
end

--- Forget a request that the server answered with -32800: vim.lsp dropped its callback and would
--- otherwise keep it listed as pending in `client.requests` forever.
--- @param request_id integer?
function M.forget_request(request_id)
  local client = M.get()
  if client and request_id and client.requests then
    client.requests[request_id] = nil
  end
end

--- Stop the client (shutdown + exit; the bridge stops every live run first).
--- @param force boolean?
function M.stop(force)
  local client = M.get()
  if client then
    call(client, 'stop', force)
  end
end

return M
