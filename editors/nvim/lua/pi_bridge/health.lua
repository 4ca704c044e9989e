--- `:checkhealth pi_bridge`: Neovim, the plugin's venv, the bridge (started and asked to
--- initialize), then `pi-bridge doctor --json`: Python, its dependencies, Node, pi, models, keys.
local protocol = require('pi_bridge.core.protocol')

local M = {}

local health = vim.health

local TIMEOUT_MS = 15000

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

--- Start the bridge as configured, initialize it, read its capabilities, shut it down.
local function check_bridge(cfg)
  local exe = exepath(cfg.cmd[1], cfg.cmd_env)
  if not exe then
    health.error(('bridge command %q not found'):format(cfg.cmd[1]), {
      require('pi_bridge.core.install').build_command()
        .. "   (installs the bridge into the plugin's venv)",
      "or point setup{ cmd = { '/path/to/python', '-m', 'bridge' } } at an installed bridge",
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
  }, { cwd = cfg.cmd_cwd, env = require('pi_bridge.core.client').cmd_env(cfg) })
  if not ok then
    health.error('could not start the bridge: ' .. tostring(rpc))
    return
  end
  rpc.request('initialize', {
    processId = vim.fn.getpid(),
    rootUri = vim.uri_from_fname(vim.fn.getcwd()),
    capabilities = {},
    initializationOptions = require('pi_bridge.core.client').init_options(cfg),
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
      M.check_sandbox(cfg.sandbox, pib.sandbox)
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

--- Which bridge runs: the plugin's venv (the build step), else `pi-bridge` on PATH, else the fix.
local function check_install(cfg)
  local install = require('pi_bridge.core.install')
  local python, version, problem = install.find_python()
  if python then
    health.ok(('%s (%s) for the build step'):format(version, python))
  else
    health.warn(
      problem,
      { 'install Python >= 3.11 with venv, e.g. `sudo apt install python3 python3-venv`' }
    )
  end
  if cfg.cmd[1] == install.venv_bridge() then
    health.ok("the plugin's venv: " .. install.venv())
  elseif cfg.cmd[1] == 'pi-bridge' and not exepath('pi-bridge', cfg.cmd_env) then
    health.error(
      ("no bridge: the plugin's venv %s is missing and pi-bridge is not on PATH"):format(
        install.venv()
      ),
      {
        install.build_command()
          .. "   (the lazy.nvim build step; it installs the bridge from the plugin's checkout)",
      }
    )
  else
    health.info(
      ('the venv %s is not used: cmd is %s'):format(install.venv(), table.concat(cfg.cmd, ' '))
    )
  end
end

local function shell_quote(arg)
  return "'" .. arg:gsub("'", "'\\''") .. "'"
end

--- `<cmd> doctor --json`: the bridge's own checks (Python, its dependencies, Node, pi and its
--- version, pi's models, key variable names), each with its fix.
local function check_doctor(cfg)
  if not exepath(cfg.cmd[1], cfg.cmd_env) then
    health.info('skipped: the bridge command is not found (see above)')
    return
  end
  local argv = vim.deepcopy(cfg.cmd)
  if argv[#argv] == 'serve' then
    argv[#argv] = nil
  end
  if type(cfg.pi_command) == 'table' then
    vim.list_extend(
      argv,
      { '--pi-command', table.concat(vim.tbl_map(shell_quote, cfg.pi_command), ' ') }
    )
  end
  vim.list_extend(argv, { 'doctor', '--json' })
  local env = require('pi_bridge.core.client').cmd_env(cfg)
  local ok, obj = pcall(function()
    return vim.system(argv, { text = true, env = env, cwd = cfg.cmd_cwd }):wait(60000)
  end)
  local report = ok
    and obj.stdout
    and pcall(vim.json.decode, obj.stdout)
    and vim.json.decode(obj.stdout)
  if type(report) ~= 'table' or type(report.checks) ~= 'table' then
    health.error(
      ('`%s` gave no report: %s'):format(
        table.concat(argv, ' '),
        ok and vim.trim((obj.stderr or '') .. ' ' .. (obj.stdout or '')) or tostring(obj)
      ),
      { require('pi_bridge.core.install').build_command() }
    )
    return
  end
  for _, check in ipairs(report.checks) do
    local line = ('%s: %s'):format(check.label, check.summary)
    local advice = type(check.fix) == 'string' and { check.fix } or nil
    if advice and (check.name == 'models' or check.name == 'apiKeys') and not advice[1]:find('Neovim', 1, true) then
      vim.list_extend(advice, M.first_run_advice()) -- a doctor that names no editor's way
    end
    if check.status == 'ok' then
      health.ok(line)
    elseif check.status == 'warn' then
      health.warn(line, advice)
    elseif check.status == 'fail' then
      health.error(line, advice)
    else
      health.info(line)
    end
  end
end

--- What a first run without a key needs, in Neovim's terms and in the doctor's words (its fix
--- names the key variable, `cmd_env` and the scripted model; bridge/agents/pi/doctor.py).
--- @return string[]
function M.first_run_advice()
  return {
    'in Neovim: setup({ cmd_env = { ANTHROPIC_API_KEY = ... } }) (or export ANTHROPIC_API_KEY=...'
      .. ' before Neovim starts, or run `pi` then /login once)',
    "to try without a key: setup({ cmd_env = { PI_BRIDGE_SCRIPTED_MODEL = '1' } }) for the"
      .. " scripted model (or cmd = { 'pi-bridge', '--scripted-model' }), then :PiModel",
  }
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

--- The sandbox setup asks for against what the bridge says it can give (its reason and fix).
--- @param wanted pi_bridge.Sandbox
--- @param capability table? `{available, kind, reason, fix}` of initialize
function M.check_sandbox(wanted, capability)
  if type(capability) ~= 'table' then
    if wanted.mode ~= 'off' then
      health.warn('the bridge says nothing of a sandbox: runs asking for one may fail', {
        'update pi-bridge',
      })
    end
    return
  end
  local reason = type(capability.reason) == 'string' and capability.reason or 'no reason given'
  local advice = type(capability.fix) == 'string' and { capability.fix } or nil
  if capability.available then
    health.ok(
      ('sandbox: %s available; setup asks for %s%s'):format(
        tostring(capability.kind),
        wanted.mode,
        wanted.mode ~= 'off' and (wanted.network and ', network on' or ', network off') or ''
      )
    )
  elseif wanted.mode ~= 'off' then
    health.error(
      ('sandbox %s is asked for but unavailable: %s (every run will fail)'):format(
        wanted.mode,
        reason
      ),
      advice
    )
  else
    local fix = advice and ('; fix: ' .. advice[1]) or '' -- health.info takes no advice
    health.info('sandbox unavailable (setup asks for none): ' .. reason .. fix)
  end
end

function M.check()
  health.start('pi_bridge')
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim >= 0.10 is required')
  end
  local cfg = require('pi_bridge.core.config').get()

  health.start('pi_bridge: install')
  check_install(cfg)

  health.start('pi_bridge: bridge')
  check_bridge(cfg)

  health.start('pi_bridge: pi-bridge doctor (Python, dependencies, Node, pi, models, keys)')
  check_doctor(cfg)
end

return M
