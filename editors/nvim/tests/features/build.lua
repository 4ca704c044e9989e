-- The documented lazy.nvim `build` step, then the plugin on the venv it made, and checkhealth's
-- fixes (run by tests/run.lua, last: it restarts the bridge). The XDG dirs are a fresh temp dir
-- (tests/run.sh), so stdpath('data') starts empty.
return function(h)
  local env, log_file, pi_bridge, handlers = h.env, h.log_file, h.pi_bridge, h.handlers
  local fail, eq, truthy, wait_for, wait_done = h.fail, h.eq, h.truthy, h.wait_for, h.wait_done
  local cmdline, descendants, test = h.cmdline, h.descendants, h.test
  local checkhealth_text = h.checkhealth_text

  local install = require('pi_bridge.core.install')
  local no_bridge_path = table.concat(
    vim.tbl_filter(function(dir)
      return vim.fn.executable(dir .. '/pi-bridge') == 0
    end, vim.split(env.PATH or vim.env.PATH, ':', { plain = true })),
    ':'
  )

  --- Stop the bridge, wait until the plugin has seen it exit, then configure it anew.
  local function use_config(overrides)
    require('pi_bridge.core.client').stop(true)
    wait_for('the client to exit', 15000, function()
      return #vim.lsp.get_clients({ name = 'pi_bridge' }) == 0
    end)
    local settled = false
    vim.schedule(function() -- after the plugin's own scheduled on_exit work
      settled = true
    end)
    wait_for('the exit to be handled', 5000, function()
      return settled
    end)
    pi_bridge.setup(vim.tbl_extend('force', { log_file = log_file, view = 'split' }, overrides))
  end

  test('before the build step, checkhealth names :PiBridgeInstall as the fix', function()
    truthy(vim.startswith(install.venv(), vim.env.XDG_DATA_HOME .. '/nvim/pi_bridge'), install.venv())
    eq(0, vim.fn.executable(install.venv_bridge()), 'a venv before the build')
    use_config({ cmd = { 'pi-bridge', '--scripted-model' }, cmd_env = { PATH = no_bridge_path } })
    local text = checkhealth_text()
    truthy(
      text:find("ERROR no bridge: the plugin's venv", 1, true),
      'no missing-venv error:\n' .. text
    )
    truthy(text:find(':PiBridgeInstall', 1, true), 'no fix command:\n' .. text)
  end)

  test(
    'the lazy.nvim build step installs the bridge into stdpath("data")/pi_bridge and :PiRun uses it',
    function()
      local bridge = install.build()
      eq(install.venv_bridge(), bridge, 'built bridge')
      eq(1, vim.fn.executable(bridge), 'venv bridge executable')
      use_config({ cmd = { 'pi-bridge', '--scripted-model' }, cmd_env = { PATH = no_bridge_path } })
      eq(bridge, pi_bridge.config().cmd[1], 'cmd resolved to the venv')
      vim.cmd('PiRun Say hello through the venv')
      local run = truthy(handlers.latest(), 'no run registered')
      wait_done(run)
      eq('completed', run.status, 'status (' .. vim.inspect(run.error) .. ')')
      local uses_venv = vim.iter(descendants(vim.fn.getpid())):any(function(p)
        return cmdline(p):find(install.venv(), 1, true) ~= nil
      end)
      truthy(uses_venv, 'no bridge process from the venv')
    end
  )

  test('with the venv, checkhealth pi_bridge is all OK', function()
    local text = checkhealth_text()
    if text:find('ERROR') or text:find('WARNING') then
      fail('checkhealth output:\n' .. text)
    end
    truthy(text:find("OK the plugin's venv: " .. install.venv(), 1, true), 'no venv line:\n' .. text)
    truthy(text:find('pi: [%d.]+'), 'no pi version line:\n' .. text)
  end)

  test('with pi removed from PATH, checkhealth names the npm command that installs it', function()
    local without_pi = table.concat(
      vim.tbl_filter(function(dir)
        return vim.fn.executable(dir .. '/pi') == 0
      end, vim.split(no_bridge_path, ':', { plain = true })),
      ':'
    )
    use_config({ cmd = { 'pi-bridge', '--scripted-model' }, cmd_env = { PATH = without_pi } })
    local text = checkhealth_text()
    truthy(text:find('ERROR pi: pi not found', 1, true), 'no missing-pi error:\n' .. text)
    truthy(
      text:find('npm install -g @earendil-works/pi-coding-agent', 1, true),
      'no npm fix:\n' .. text
    )
  end)
end
