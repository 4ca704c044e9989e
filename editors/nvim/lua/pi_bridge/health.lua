--- `:checkhealth pi_bridge`: Neovim, Python, the bridge (started and asked to initialize), pi.
local protocol = require('pi_bridge.protocol')

local M = {}

local health = vim.health

local TIMEOUT_MS = 15000

--- Run argv and return ok, first line of output (stdout, else stderr).
local function probe(argv, env, cwd)
  local ok, obj = pcall(function()
    return vim.system(argv, { text = true, env = env, cwd = cwd }):wait(TIMEOUT_MS)
  end)
  if not ok then
    return false, tostring(obj)
  end
  local out = vim.trim(obj.stdout or '')
  if out == '' then
    out = vim.trim(obj.stderr or '')
  end
  return obj.code == 0, (vim.split(out, '\n', { plain = true })[1] or '')
end

--- Split a shell-style command string (quotes and backslashes; no expansion), as the bridge does.
--- @param s string
--- @return string[]
local function shell_split(s)
  local args, cur, quote, has = {}, {}, nil, false
  local i = 1
  while i <= #s do
    local ch = s:sub(i, i)
    if quote then
      if ch == quote then
        quote = nil
      elseif ch == '\\' and quote == '"' and i < #s then
        i = i + 1
        cur[#cur + 1] = s:sub(i, i)
      else
        cur[#cur + 1] = ch
      end
    elseif ch == "'" or ch == '"' then
      quote, has = ch, true
    elseif ch == '\\' and i < #s then
      i = i + 1
      cur[#cur + 1], has = s:sub(i, i), true
    elseif ch:match('%s') then
      if has then
        args[#args + 1] = table.concat(cur)
        cur, has = {}, false
      end
    else
      cur[#cur + 1], has = ch, true
    end
    i = i + 1
  end
  if has then
    args[#args + 1] = table.concat(cur)
  end
  return args
end

--- PATH lookups honour cmd_env.PATH when it is set, as the bridge's process will.
local function exepath(name, env)
  if name:find('/') then
    return vim.fn.executable(name) == 1 and name or nil
  end
  local path = env and env.PATH or vim.env.PATH or ''
  for dir in path:gmatch('[^:]+') do
    local p = dir .. '/' .. name
    if vim.fn.executable(p) == 1 and vim.fn.isdirectory(p) == 0 then
      return p
    end
  end
  return nil
end

local function python_of(cmd, env)
  local exe = exepath(cmd[1], env)
  if not exe then
    return nil
  end
  if vim.fs.basename(exe):match('^python') then
    return exe
  end
  local first = (vim.fn.readfile(exe, '', 1)[1] or '')
  local interp = first:match('^#!%s*(%S+)')
  if interp and vim.fs.basename(interp):match('^python') then
    return interp
  end
  if interp and vim.fs.basename(interp) == 'env' then
    local name = first:match('^#!%s*%S+%s+(%S+)')
    return name and exepath(name, env)
  end
  return nil
end

local function check_python(cfg, env)
  local python = python_of(cfg.cmd, cfg.cmd_env)
  if not python then
    health.info('could not tell which Python runs ' .. cfg.cmd[1])
    return
  end
  local ok, out = probe({ python, '--version' }, env)
  local major, minor = out:match('Python (%d+)%.(%d+)')
  if not ok or not major then
    health.error(('%s --version failed: %s'):format(python, out))
  elseif tonumber(major) < 3 or (tonumber(major) == 3 and tonumber(minor) < 11) then
    health.error(('%s is %s; the bridge needs Python >= 3.11'):format(python, out))
  else
    health.ok(('%s (%s)'):format(out, python))
  end
end

--- Start the bridge as configured, initialize it, read its capabilities, shut it down.
local function check_bridge(cfg)
  local exe = exepath(cfg.cmd[1], cfg.cmd_env)
  if not exe then
    health.error(('bridge command %q not found'):format(cfg.cmd[1]), {
      'pip install the bridge (it provides the `pi-bridge` script),',
      "or point setup{ cmd = { '/path/to/python', '-m', 'bridge' } } at it",
    })
    return
  end
  health.ok('bridge command: ' .. table.concat(cfg.cmd, ' '))

  local answer, rpc_err, exited
  local ok, rpc = pcall(vim.lsp.rpc.start, cfg.cmd, {
    notification = function() end,
    server_request = function()
      return nil, vim.lsp.rpc.rpc_response_error(-32601)
    end,
    on_exit = function(code, signal)
      exited = { code, signal }
    end,
    on_error = function(code, err)
      rpc_err = ('rpc error %s: %s'):format(code, vim.inspect(err))
    end,
  }, { cwd = cfg.cmd_cwd, env = require('pi_bridge.client').cmd_env(cfg) })
  if not ok then
    health.error('could not start the bridge: ' .. tostring(rpc))
    return
  end
  rpc.request('initialize', {
    processId = vim.fn.getpid(),
    rootUri = vim.uri_from_fname(vim.fn.getcwd()),
    capabilities = {},
    initializationOptions = require('pi_bridge.client').init_options(cfg),
  }, function(err, result)
    answer = { err = err, result = result }
  end)
  vim.wait(TIMEOUT_MS, function()
    return answer ~= nil or exited ~= nil or rpc_err ~= nil
  end, 20)
  if not answer then
    health.error(
      exited and ('the bridge exited (code %s) before answering initialize'):format(exited[1])
        or rpc_err
        or ('no answer to initialize within %d ms'):format(TIMEOUT_MS),
      cfg.log_file and ('its stderr is in ' .. cfg.log_file .. ' (:PiLog)') or nil
    )
    rpc.terminate()
    return
  end
  if answer.err then
    health.error('initialize failed: ' .. vim.inspect(answer.err))
  else
    local info = answer.result.serverInfo or {}
    local pib = ((answer.result.capabilities or {}).experimental or {}).piBridge or {}
    if info.name ~= protocol.SERVER_NAME then
      health.error(
        ('serverInfo.name is %q, expected %q'):format(tostring(info.name), protocol.SERVER_NAME)
      )
    elseif pib.protocolVersion ~= protocol.PROTOCOL_VERSION then
      health.error(
        ('protocolVersion %s, this plugin speaks %d'):format(
          tostring(pib.protocolVersion),
          protocol.PROTOCOL_VERSION
        )
      )
    else
      health.ok(
        ('bridge answers: %s %s, protocolVersion %d'):format(
          info.name,
          info.version or '',
          pib.protocolVersion
        )
      )
      M.check_conversation_methods(pib.methods)
    end
  end
  local down = false
  rpc.request('shutdown', nil, function()
    down = true
  end)
  vim.wait(TIMEOUT_MS, function()
    return down or exited ~= nil
  end, 20)
  rpc.notify('exit', nil)
  vim.wait(TIMEOUT_MS, function()
    return exited ~= nil
  end, 20)
  if not exited then
    rpc.terminate()
  end
end

local function check_pi(cfg, env)
  local argv, from
  if type(cfg.pi_command) == 'table' then
    argv, from = vim.deepcopy(cfg.pi_command), 'setup{ pi_command }'
  elseif type(cfg.pi_command) == 'string' then
    argv, from = shell_split(cfg.pi_command), 'setup{ pi_command }'
  elseif (cfg.cmd_env or {}).PI_BRIDGE_PI_COMMAND or vim.env.PI_BRIDGE_PI_COMMAND then
    argv = shell_split((cfg.cmd_env or {}).PI_BRIDGE_PI_COMMAND or vim.env.PI_BRIDGE_PI_COMMAND)
    from = '$PI_BRIDGE_PI_COMMAND'
  else
    argv, from = { 'pi' }, 'PATH'
  end
  local exe = argv[1] and exepath(argv[1], cfg.cmd_env)
  if not exe then
    health.error(('pi not found (%s from %s)'):format(tostring(argv[1]), from), {
      'npm install -g @earendil-works/pi-coding-agent (needs Node >= 20)',
      'or set setup{ pi_command = ... }',
    })
    return
  end
  argv[1] = exe
  argv[#argv + 1] = '--version'
  local ok, out = probe(argv, env)
  if ok and out ~= '' then
    health.ok(('pi %s (%s, from %s)'):format(out, exe, from))
  else
    health.error(('%s failed: %s'):format(table.concat(argv, ' '), out))
  end
end

--- The chat (:PiChat, :PiSessions, steering) needs the conversation methods.
--- @param methods string[]?
function M.check_conversation_methods(methods)
  local missing = vim.tbl_filter(function(m)
    return not vim.tbl_contains(methods or {}, m)
  end, protocol.CONVERSATION_METHODS)
  if #missing == 0 then
    health.ok('conversations: ' .. table.concat(protocol.CONVERSATION_METHODS, ', '))
  else
    health.warn(
      'the bridge lacks ' .. table.concat(missing, ', ') .. ': :PiChat cannot steer or resume',
      { 'update pi-bridge' }
    )
  end
end

function M.check()
  health.start('pi_bridge')
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim >= 0.10 is required')
  end
  local cfg = require('pi_bridge').config()
  local env = cfg.cmd_env -- vim.system adds these to the inherited environment

  health.start('pi_bridge: Python')
  check_python(cfg, env)

  health.start('pi_bridge: bridge')
  check_bridge(cfg)

  health.start('pi_bridge: pi')
  check_pi(cfg, env)
end

return M
