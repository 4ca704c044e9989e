--- The one pi-bridge LSP client of this Neovim: start it on first use, send requests once initialized.
local protocol = require('pi_bridge.protocol')

local M = {}

local NAME = 'pi_bridge'

--- @type integer?
local client_id
--- Requests waiting for the client to finish `initialize`.
--- @type fun(client: vim.lsp.Client?, err: string?)[]
local pending = {}

local has_011 = vim.fn.has('nvim-0.11') == 1

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

  local cfg = require('pi_bridge').config()
  if vim.fn.executable(cfg.cmd[1]) == 0 then
    flush(
      nil,
      ('bridge command not executable: %s (see :checkhealth pi_bridge)'):format(cfg.cmd[1])
    )
    return
  end
  local handlers = require('pi_bridge.handlers')
  local config = {
    name = NAME,
    cmd = cfg.cmd,
    cmd_cwd = cfg.cmd_cwd,
    cmd_env = M.cmd_env(cfg),
    root_dir = vim.fn.getcwd(),
    init_options = M.init_options(cfg),
    handlers = {
      [protocol.MESSAGE] = handlers.on_message,
      [protocol.REQUEST_PERMISSION] = require('pi_bridge.approve').on_request,
      [protocol.ASK] = require('pi_bridge.ask').on_ask,
    },
    capabilities = require('pi_bridge.approve').capabilities(),
    -- No flags.exit_timeout: on VimLeavePre, Neovim 0.11 would then always wait that long before
    -- killing the client. Without it Neovim sends shutdown and exits; the closed stdin makes the
    -- bridge stop every live run (its whole process tree) by itself.
    on_init = function(c, result)
      local info = result and result.capabilities and result.capabilities.experimental
      local pib = info and info.piBridge
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
        handlers.on_exit(code, signal)
      end)
    end,
  }
  local id
  if has_011 then
    id = vim.lsp.start(config, {
      attach = false,
      silent = true,
      reuse_client = function()
        return false -- one client per Neovim, tracked here
      end,
    })
  else
    id = vim.lsp.start_client(config)
  end
  if not id then
    flush(nil, 'could not start the bridge: ' .. table.concat(cfg.cmd, ' '))
    return
  end
  client_id = id
  M.sync_documents(id)
end

--- Whether `buf` is a file the user edits (not a scratch, help, terminal or chat buffer).
--- @param buf integer
--- @return boolean
function M.is_file_buffer(buf)
  return vim.api.nvim_buf_is_loaded(buf)
    and vim.bo[buf].buftype == ''
    and vim.api.nvim_buf_get_name(buf) ~= ''
end

--- Attach the client to every file buffer, open now or later: vim.lsp then sends didOpen,
--- didChange and didClose, so the bridge reads what the user sees, and an agent's write to a
--- buffer with unsaved changes comes back as `workspace/applyEdit`, which vim.lsp's own handler
--- applies to the buffer (its client capabilities declare `workspace.applyEdit`).
--- @param id integer
function M.sync_documents(id)
  local function attach(buf)
    if id == client_id and M.is_file_buffer(buf) and not vim.lsp.buf_is_attached(buf, id) then
      vim.lsp.buf_attach_client(buf, id)
    end
  end
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    attach(buf)
  end
  local group = vim.api.nvim_create_augroup('pi_bridge_document_sync', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile', 'BufFilePost' }, {
    group = group,
    callback = function(ev)
      attach(ev.buf)
    end,
  })
end

--- Send a request once the client is ready. `handler(err, result)` gets the response; it is not
--- called for a -32800 answer (vim.lsp drops those), see handlers.lua.
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
