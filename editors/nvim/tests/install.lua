-- The documented installs, each as editors/nvim/README.md writes it, in a fresh headless Neovim:
-- its own XDG dirs (so stdpath('data') and the config start empty), its own empty pi agent dir (a
-- first run: no key, no model), no pi-bridge on PATH.
--
--   nvim --headless -u NONE -i NONE -l editors/nvim/tests/install.lua
--
-- - native package: the README's `ln -s <checkout>/editors/nvim .../site/pack/pi/start/pi_bridge`,
--   then Neovim starts with no config at all; `:help pi_bridge`, `:PiMode` (no argument: a picker),
--   `:PiBridgeInstall`, `:checkhealth pi_bridge`.
-- - lazy.nvim: the README's spec, read from the README. lazy.nvim is on no registry this CI can
--   reach and is not vendored, so the test does what lazy does with such a spec: the `build` step
--   at install, a stub per `cmd` that, when used, puts `dir` on 'runtimepath', sources its
--   plugin/ files, calls `setup(opts)` and runs the command again with its arguments.
-- Env: PATH with Node 22 and pi (<repo>/.tools/node_modules/.bin is prepended when present).
-- Prints `N passed, M failed`; exit code 1 on any failure.
local script = debug.getinfo(1, 'S').source:sub(2)
local nvim_dir = vim.fn.fnamemodify(script, ':p:h:h')
local root = vim.fn.fnamemodify(nvim_dir, ':h:h')
local tools = root .. '/.tools/node_modules/.bin'
local path = vim.env.PATH
if vim.fn.isdirectory(tools) == 1 then
  path = tools .. ':' .. path
end
-- A new user has no pi-bridge on PATH: the plugin's venv is the bridge.
path = table.concat(
  vim.tbl_filter(function(dir)
    return vim.fn.executable(dir .. '/pi-bridge') == 0
  end, vim.split(path, ':', { plain = true })),
  ':'
)

local function say(line)
  io.stdout:write(line, '\n')
  io.stdout:flush()
end

local function fail(msg)
  error(msg, 2)
end

local function eq_true(v, what)
  if not v then
    error(what, 2)
  end
end

local function truthy(v, what)
  if not v then
    error(what, 2)
  end
  return v
end

--- A fresh home for one Neovim: XDG dirs and an empty pi agent dir.
local function fresh_env()
  local dir = vim.fn.tempname()
  local env = {
    XDG_CONFIG_HOME = dir .. '/config',
    XDG_DATA_HOME = dir .. '/data',
    XDG_STATE_HOME = dir .. '/state',
    XDG_CACHE_HOME = dir .. '/cache',
    XDG_RUNTIME_DIR = dir .. '/run',
    PI_CODING_AGENT_DIR = dir .. '/pi-agent',
    PATH = path,
  }
  for _, d in pairs({ env.XDG_CONFIG_HOME, env.XDG_DATA_HOME, env.XDG_RUNTIME_DIR, env.PI_CODING_AGENT_DIR }) do
    vim.fn.mkdir(d, 'p')
  end
  vim.uv.fs_chmod(env.XDG_RUNTIME_DIR, tonumber('700', 8))
  return dir, env
end

-- What the user does inside the fresh Neovim, as Lua run by `-c luafile` after its startup; the
-- results go to a JSON file. `vim.ui.select` and `vim.notify` are watched, not answered.
local USER_SESSION = [[
local out = { notes = {}, pickers = {}, startup_errors = vim.v.errmsg }
vim.notify = function(msg, level)
  table.insert(out.notes, { msg = msg, level = level })
end
vim.ui.select = function(items, opts, on_choice)
  local shown = {}
  for _, item in ipairs(items) do
    table.insert(shown, opts.format_item and opts.format_item(item) or tostring(item))
  end
  table.insert(out.pickers, { prompt = opts.prompt, kind = opts.kind, items = shown })
  on_choice(nil)
end
local function step(name, fn)
  local ok, err = pcall(fn)
  out[name] = ok and true or tostring(err)
end
out.before_use = vim.fn.exists(':PiMode') == 2
local function help()
  vim.cmd('help pi_bridge')
  out.help_file = vim.fn.expand('%:t')
  vim.cmd('helpclose')
end
if vim.env.PI_TEST_HELP_FIRST == '1' then
  step('help', help)
end
step('mode', function()
  vim.cmd('PiMode')
end)
if vim.env.PI_TEST_HELP_FIRST ~= '1' then
  step('help', help)
end
if vim.env.PI_TEST_INSTALL == '1' then
  step('install', function()
    vim.cmd('PiBridgeInstall')
  end)
end
step('health', function()
  vim.cmd('checkhealth pi_bridge')
  out.health_text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, true), '\n')
end)
out.commands = vim.tbl_keys(vim.api.nvim_get_commands({}))
vim.fn.writefile({ vim.json.encode(out) }, vim.env.PI_TEST_OUT)
vim.cmd('qall!')
]]

--- Start a Neovim the way a user does (`nvim`, here headless), with `extra` arguments, and run
--- USER_SESSION in it; its results.
local function user_session(dir, env, extra, install)
  local session_file = dir .. '/session.lua'
  vim.fn.writefile(vim.split(USER_SESSION, '\n'), session_file)
  env.PI_TEST_OUT = dir .. '/out.json'
  env.PI_TEST_INSTALL = install and '1' or '0'
  local argv = { vim.v.progpath, '--headless', '-i', 'NONE' }
  vim.list_extend(argv, extra or {})
  vim.list_extend(argv, { '-c', 'luafile ' .. vim.fn.fnameescape(session_file) })
  local obj = vim.system(argv, { env = env, cwd = dir, text = true, stdin = false }):wait(400000)
  truthy(
    vim.fn.filereadable(env.PI_TEST_OUT) == 1,
    ('the Neovim session wrote no result (exit %s): %s %s'):format(
      tostring(obj.code),
      obj.stdout or '',
      obj.stderr or ''
    )
  )
  local out = vim.json.decode(table.concat(vim.fn.readfile(env.PI_TEST_OUT), '\n'))
  out.stderr = obj.stderr
  return out
end

--- The checks both installs share: help without :helptags, :PiMode's picker, a health report
--- that names no install step once the build ran, and the first-run advice (no key here).
local function check_session(out, how)
  eq_true(out.help == true, how .. ': :help pi_bridge failed: ' .. tostring(out.help))
  eq_true(out.help_file == 'pi_bridge.txt', how .. ': help opened ' .. tostring(out.help_file))
  eq_true(out.mode == true, how .. ': :PiMode failed: ' .. tostring(out.mode))
  local picker = out.pickers[1]
  truthy(picker and picker.kind == 'pi_bridge.mode', how .. ': no mode picker: ' .. vim.inspect(out.pickers))
  local items = table.concat(picker.items, '\n')
  for _, mode in ipairs({ 'ask', 'auto-edit', 'plan', 'full' }) do
    truthy(items:find(mode, 1, true), how .. ': picker lacks ' .. mode .. ':\n' .. items)
  end
  truthy(items:find('● ask', 1, true), how .. ': the current mode (ask) is not marked:\n' .. items)
  eq_true(out.health == true, how .. ': checkhealth failed: ' .. tostring(out.health))
  local health = out.health_text
  truthy(health:find("OK the plugin's venv", 1, true), how .. ': no venv in checkhealth:\n' .. health)
  truthy(not health:find('PiBridgeInstall', 1, true), how .. ': checkhealth still asks for :PiBridgeInstall:\n' .. health)
  -- The first run: no key. The doctor's words, and the Neovim ways to act on them.
  truthy(health:find('pi has no model it can use', 1, true), how .. ': no missing-model line:\n' .. health)
  truthy(health:find('cmd_env = { ANTHROPIC_API_KEY', 1, true), how .. ': no Neovim option to set the key:\n' .. health)
  truthy(health:find("PI_BRIDGE_SCRIPTED_MODEL = '1'", 1, true), how .. ': no scripted model to try:\n' .. health)
end

local tests = {}
local function test(name, fn)
  tests[#tests + 1] = { name = name, fn = fn }
end

test('native package as the README writes it: help, :PiMode picker, :PiBridgeInstall, checkhealth', function()
  local dir, env = fresh_env()
  -- README: ln -s ~/src/pi-bridge/editors/nvim ~/.local/share/nvim/site/pack/pi/start/pi_bridge
  local start = env.XDG_DATA_HOME .. '/nvim/site/pack/pi/start'
  vim.fn.mkdir(start, 'p')
  assert(vim.uv.fs_symlink(nvim_dir, start .. '/pi_bridge'))
  env.PI_TEST_HELP_FIRST = '1' -- :help before anything else: no :helptags was run
  local out = user_session(dir, env, {}, true)
  eq_true(out.before_use, 'the package did not load at startup')
  eq_true(out.install == true, ':PiBridgeInstall failed: ' .. tostring(out.install))
  local installed = vim.iter(out.notes):find(function(n)
    return n.msg:find('bridge installed', 1, true)
  end)
  truthy(installed, ':PiBridgeInstall said: ' .. vim.inspect(out.notes))
  truthy(
    vim.fn.executable(env.XDG_DATA_HOME .. '/nvim/pi_bridge/venv/bin/pi-bridge') == 1,
    'no venv bridge under the fresh stdpath("data")'
  )
  check_session(out, 'native package')
end)

--- The user's init.lua holding `spec_text`, and lazy.nvim's part as it treats such a spec: the
--- `build` step at install (PI_TEST_BUILD=1), then with `cmd` a stub per command that loads the
--- plugin and runs the command again, without `cmd` the plugin loaded at startup; loading puts
--- `dir` on 'runtimepath', sources its plugin/ files and calls `setup(opts)`.
local function write_lazy_init(env, spec_text)
  local init = {
    'local spec = ' .. spec_text,
    'local function load()',
    '  for _, name in ipairs(spec.cmd or {}) do pcall(vim.api.nvim_del_user_command, name) end',
    '  vim.opt.rtp:prepend(spec.dir)',
    "  for _, f in ipairs(vim.fn.glob(spec.dir .. '/plugin/*.lua', false, true)) do vim.cmd.source(f) end",
    "  if spec.opts then require('pi_bridge').setup(spec.opts) end",
    'end',
    -- lazy.nvim runs `build` in a Neovim where the plugin is on 'runtimepath'.
    "if vim.env.PI_TEST_BUILD == '1' then",
    '  vim.opt.rtp:prepend(spec.dir)',
    '  spec.build()',
    '  vim.opt.rtp:remove(spec.dir)',
    'end',
    'if not spec.cmd then',
    '  load()',
    'end',
    'for _, name in ipairs(spec.cmd or {}) do',
    '  vim.api.nvim_create_user_command(name, function(o)',
    '    load()',
    "    vim.cmd((o.range > 0 and (o.line1 .. ',' .. o.line2) or '') .. name .. (o.bang and '!' or '') .. ' ' .. o.args)",
    "  end, { nargs = '*', range = true, bang = true })",
    'end',
  }
  vim.fn.mkdir(env.XDG_CONFIG_HOME .. '/nvim', 'p')
  vim.fn.writefile(vim.split(table.concat(init, '\n'), '\n'), env.XDG_CONFIG_HOME .. '/nvim/init.lua')
end

--- The README's lazy.nvim spec: the Lua table after `-- lazy.nvim` in its first lua block.
local function readme_lazy_spec()
  local readme = table.concat(vim.fn.readfile(nvim_dir .. '/README.md'), '\n')
  local block = truthy(readme:match('```lua\n%-%- lazy%.nvim\n(.-)\n```'), 'no lazy.nvim block in the README')
  return block
end

test('lazy.nvim spec as the README writes it: its cmd list, build, help, :PiMode picker, checkhealth', function()
  local dir, env = fresh_env()
  local spec_text = readme_lazy_spec()
  -- The user's own checkout stands where the README's `dir` points.
  spec_text = spec_text:gsub("'~/src/pi%-bridge/editors/nvim'", vim.inspect(nvim_dir))
  local spec = assert(loadstring('return ' .. spec_text))()
  truthy(spec.dir == nvim_dir, 'the spec names no dir: ' .. spec_text)
  -- Every command the plugin defines is one the spec's stubs load it for.
  local defined = {}
  for line in io.lines(nvim_dir .. '/plugin/pi_bridge.lua') do
    local name = line:match("^command%(%s*'(%u%a+)'") or line:match("^%s*'(Pi%a+)',$")
    if name then
      defined[#defined + 1] = name
    end
  end
  truthy(#defined >= 17, 'commands found in plugin/pi_bridge.lua: ' .. vim.inspect(defined))
  local missing = vim.tbl_filter(function(name)
    return not vim.tbl_contains(spec.cmd, name)
  end, defined)
  truthy(#missing == 0, "the README's cmd list leaves out " .. table.concat(missing, ', '))
  -- lazy's part, as its init.lua: install (build), then a stub per cmd.
  write_lazy_init(env, spec_text)
  env.PI_TEST_BUILD = '1'
  local out = user_session(dir, env, {}, false)
  truthy(
    vim.fn.executable(env.XDG_DATA_HOME .. '/nvim/pi_bridge/venv/bin/pi-bridge') == 1,
    'the build step made no venv bridge under the fresh stdpath("data"): '
      .. tostring(out.startup_errors) .. ' ' .. tostring(out.stderr)
  )
  -- Here :help comes after :PiMode loaded the plugin (lazy.nvim's own help index, which finds
  -- the docs of a plugin not yet loaded, is not emulated).
  check_session(out, 'lazy.nvim')
end)

test("the top README's lazy.nvim spec (no cmd: loaded at startup): help, :PiMode picker, checkhealth names the build", function()
  local dir, env = fresh_env()
  local readme = table.concat(vim.fn.readfile(root .. '/README.md'), '\n')
  local spec_text = truthy(readme:match('%*%*Neovim%*%* %(lazy%.nvim%): `({.-})`'), 'no lazy spec in the top README')
  spec_text = spec_text:gsub("'<checkout>/editors/nvim'", vim.inspect(nvim_dir))
  local spec = assert(loadstring('return ' .. spec_text))()
  truthy(spec.dir == nvim_dir and spec.cmd == nil, spec_text)
  -- Its build step is the editors/nvim README's, which the test above runs; not run twice here.
  truthy(spec_text:find("require('pi_bridge.install').build()", 1, true), 'another build: ' .. spec_text)
  truthy(readme_lazy_spec():find("require('pi_bridge.install').build()", 1, true), 'the builds differ')
  write_lazy_init(env, spec_text)
  env.PI_TEST_HELP_FIRST = '1'
  local out = user_session(dir, env, {}, false)
  eq_true(out.before_use, 'not loaded at startup: ' .. tostring(out.startup_errors))
  eq_true(out.help == true and out.help_file == 'pi_bridge.txt', ':help pi_bridge: ' .. tostring(out.help))
  local picker = out.pickers[1]
  truthy(picker and picker.kind == 'pi_bridge.mode', 'no mode picker: ' .. vim.inspect(out.pickers))
  -- Before the build: checkhealth says what to run.
  truthy(out.health_text:find("ERROR no bridge: the plugin's venv", 1, true), out.health_text)
  truthy(out.health_text:find(':PiBridgeInstall', 1, true), out.health_text)
end)

test('the committed doc/tags is what :helptags makes of doc/pi_bridge.txt', function()
  local copy = vim.fn.tempname()
  vim.fn.mkdir(copy, 'p')
  vim.fn.writefile(vim.fn.readfile(nvim_dir .. '/doc/pi_bridge.txt', 'b'), copy .. '/pi_bridge.txt', 'b')
  vim.cmd('helptags ' .. vim.fn.fnameescape(copy))
  eq_true(
    vim.deep_equal(vim.fn.readfile(copy .. '/tags'), vim.fn.readfile(nvim_dir .. '/doc/tags')),
    'doc/tags is stale: run `nvim --headless -c "helptags editors/nvim/doc" -c q`'
  )
end)

local passed, failed = dofile(nvim_dir .. '/tests/support/runner.lua')(tests, say)
say(('%d passed, %d failed'):format(passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
