-- Headless tests of the pi-bridge Neovim plugin against the real bridge, its scripted model and pi.
--
--   nvim --headless -u NONE -i NONE --cmd 'set rtp^=editors/nvim' -l editors/nvim/tests/run.lua
--
-- Env: PI_BRIDGE_PYTHON (python able to run `-m bridge`, default <repo>/.venv/bin/python),
-- PATH with Node 22 and pi first (<repo>/.tools/node_modules/.bin is prepended when present),
-- PI_BRIDGE_TEST_FILTER (Lua pattern: run only matching tests), PI_BRIDGE_TEST_SHOW_LOG (print the
-- bridge's log even when all pass). Prints `N passed, M failed`; exit code 1 on any failure.
local script = debug.getinfo(1, 'S').source:sub(2)
local nvim_dir = vim.fn.fnamemodify(script, ':p:h:h')
local root = vim.fn.fnamemodify(nvim_dir, ':h:h')
vim.opt.rtp:prepend(nvim_dir)
vim.cmd.runtime('plugin/pi_bridge.lua')

local python = os.getenv('PI_BRIDGE_PYTHON') or (root .. '/.venv/bin/python')
local env = {}
local tools = root .. '/.tools/node_modules/.bin'
if vim.fn.isdirectory(tools) == 1 then
  env.PATH = tools .. ':' .. vim.env.PATH
end
local tmp = vim.fn.tempname()
vim.fn.mkdir(tmp, 'p')
local log_file = tmp .. '/bridge.log'

local pi_bridge = require('pi_bridge')
local handlers = require('pi_bridge.handlers')
local options = {
  cmd = { python, '-m', 'bridge', '--scripted-model' },
  cmd_cwd = root,
  cmd_env = env,
  log_file = log_file,
  view = 'split',
}
pi_bridge.setup(options)

-- ------------------------------------------------------------------ helpers

--- print() in `nvim -l` ends a line only when the next message starts: write whole lines instead.
local function say(line)
  io.stdout:write(line, '\n')
  io.stdout:flush()
end

local function fail(msg, level)
  error(msg, (level or 1) + 1)
end

local function eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    fail(('%s: expected %s, got %s'):format(what, vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

local function truthy(v, what)
  if not v then
    fail(what, 2)
  end
  return v
end

--- Every wait has a condition and a timeout.
local function wait_for(what, timeout_ms, cond)
  if not vim.wait(timeout_ms, cond, 20) then
    fail(('timed out after %d ms waiting for %s'):format(timeout_ms, what), 2)
  end
end

local function buffer_text(buf)
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, true), '\n')
end

local function messages_of(run, type_)
  return vim.tbl_filter(function(m)
    return m.type == type_
  end, run.messages)
end

local function check_seq(run)
  for i, m in ipairs(run.messages) do
    eq(i, m.seq, 'seq of message ' .. i)
  end
end

local function wait_done(run, timeout_ms)
  wait_for('run ' .. run.id .. ' to end', timeout_ms or 60000, function()
    return run.done
  end)
  -- the pi/run answer (or, for a cancelled run, the pi/cancel answer) follows the last message
end

-- /proc: state, ppid and start time of a process; nil once it is gone.
local function proc_stat(pid)
  local f = io.open('/proc/' .. pid .. '/stat')
  if not f then
    return nil
  end
  local s = f:read('*a')
  f:close()
  local rest = s:match('^.*%) (.*)$')
  if not rest then
    return nil
  end
  local fields = vim.split(rest, ' ', { plain = true })
  return { state = fields[1], ppid = tonumber(fields[2]), start = fields[20] }
end

local function cmdline(pid)
  local f = io.open('/proc/' .. pid .. '/cmdline')
  if not f then
    return ''
  end
  local s = f:read('*a'):gsub('%z', ' ')
  f:close()
  return vim.trim(s)
end

local function all_stats()
  local out = {}
  for name in vim.fs.dir('/proc') do
    if name:match('^%d+$') then
      local st = proc_stat(name)
      if st then
        out[tonumber(name)] = st
      end
    end
  end
  return out
end

local function descendants(pid)
  local stats = all_stats()
  local out, frontier = {}, { pid }
  while #frontier > 0 do
    local next_ = {}
    for p, st in pairs(stats) do
      if vim.tbl_contains(frontier, st.ppid) then
        out[#out + 1] = p
        next_[#next_ + 1] = p
      end
    end
    frontier = next_
  end
  return out
end

local function alive(pid, start)
  local st = proc_stat(pid)
  return st ~= nil and st.start == start and st.state ~= 'Z' and st.state ~= 'X'
end

-- ------------------------------------------------------------------ tests

local tests = {}
local function test(name, fn)
  tests[#tests + 1] = { name = name, fn = fn }
end

--- The text of `:checkhealth pi_bridge`; its tab (or buffer) is closed again.
local function checkhealth_text()
  vim.cmd('checkhealth pi_bridge')
  io.stdout:write('\n') -- after checkhealth's progress message
  local text = buffer_text(0)
  if #vim.api.nvim_list_tabpages() > 1 then
    vim.cmd('tabclose')
  else
    vim.cmd('bwipeout')
  end
  return text
end

test('checkhealth pi_bridge reports OK and no ERROR', function()
  local text = checkhealth_text()
  local ok_lines = select(2, text:gsub('OK', ''))
  if text:find('ERROR') or ok_lines < 5 then
    fail('checkhealth output:\n' .. text)
  end
  truthy(text:find('bridge answers: pi%-bridge'), 'no "bridge answers" line:\n' .. text)
  truthy(text:find('pi: [%d.]+'), 'no pi version line:\n' .. text)
  truthy(text:find('Node: [%d.]+'), 'no Node version line:\n' .. text)
end)

test('protocol.lua mirrors the committed schema', function()
  local protocol = require('pi_bridge.protocol')
  local schema =
    vim.json.decode(table.concat(vim.fn.readfile(root .. '/docs/protocol.schema.json'), '\n'))
  local defs = schema['$defs']
  local from_schema = vim.tbl_keys(defs.PiMessage.discriminator.mapping)
  local mirrored = vim.tbl_values(protocol.types)
  table.sort(from_schema)
  table.sort(mirrored)
  eq(from_schema, mirrored, 'message types')
  eq(defs.RunParams.properties.thinking.anyOf[1].enum, protocol.THINKING_LEVELS, 'thinking levels')
  for _, method in ipairs({ protocol.RUN, protocol.CANCEL, protocol.RUNS, protocol.MESSAGE }) do
    truthy(schema.description:find(method, 1, true), method .. ' not in the schema description')
  end
  truthy(
    schema.description:find('protocolVersion ' .. protocol.PROTOCOL_VERSION, 1, true),
    'protocolVersion'
  )
end)

test(':PiRun streams a text answer into the buffer', function()
  vim.cmd('PiRun Say hello to the tests')
  local run = truthy(handlers.latest(), 'no run registered')
  local changes = 0
  vim.api.nvim_buf_attach(run.buf, false, {
    on_lines = function()
      changes = changes + 1
    end,
  })
  wait_done(run)
  eq('completed', run.status, 'status')
  check_seq(run)
  local term = run.messages[#run.messages]
  eq('terminal.completed', term.type, 'last message')
  local deltas = table.concat(vim.tbl_map(function(m)
    return m.content.text
  end, messages_of(run, 'assistant')))
  truthy(#deltas > 0, 'no assistant text')
  local n = #messages_of(run, 'assistant')
  truthy(n > 3 and changes >= n, ('streamed: %d buffer changes for %d deltas'):format(changes, n))
  eq(term.content.text, deltas, 'concatenated deltas')
  truthy(
    buffer_text(run.buf):find(term.content.text, 1, true),
    'buffer lacks the answer:\n' .. buffer_text(run.buf)
  )
  wait_for('the pi/run answer', 10000, function()
    return run.result ~= nil
  end)
  eq('completed', run.result.status, 'result status')
  eq(term.content.text, run.result.text, 'result text')
  -- what the running bridge advertises matches the mirror too
  local caps = require('pi_bridge.client').get().server_capabilities.experimental.piBridge
  local protocol = require('pi_bridge.protocol')
  eq({ protocol.RUN, protocol.CANCEL, protocol.RUNS }, caps.methods, 'advertised methods')
  eq({ protocol.MESSAGE }, caps.notifications, 'advertised notifications')
  local advertised, mirrored = vim.deepcopy(caps.messageTypes), vim.tbl_values(protocol.types)
  table.sort(advertised)
  table.sort(mirrored)
  eq(advertised, mirrored, 'advertised message types')
  truthy(vim.api.nvim_buf_get_lines(run.buf, 0, 1, true)[1]:find('[completed]', 1, true), 'header')
end)

test('a tool call is one folded line with its status and output', function()
  local run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool' }))
  wait_done(run)
  eq('completed', run.status, 'status')
  check_seq(run)
  eq(1, #messages_of(run, 'tool.call'), 'tool.call count')
  local lines = vim.api.nvim_buf_get_lines(run.buf, 0, -1, true)
  local row
  for i, l in ipairs(lines) do
    if l:find('⚙ bash: echo hi', 1, true) then
      row = i
    end
  end
  truthy(row, 'no tool line:\n' .. table.concat(lines, '\n'))
  truthy(lines[row]:find('[done]', 1, true), 'tool status: ' .. lines[row])
  eq('  │ hi', lines[row + 1], 'tool output line')
  local win = truthy(vim.fn.win_findbuf(run.buf)[1], 'run buffer not shown')
  local closed = vim.api.nvim_win_call(win, function()
    return vim.fn.foldclosed(row)
  end)
  eq(row, closed, 'the tool output is a closed fold starting at the tool line')
  -- the text before and after the tool call, each where it was streamed
  local segments, cur = {}, ''
  for _, m in ipairs(run.messages) do
    if m.type == 'assistant' then
      cur = cur .. m.content.text
    elseif cur ~= '' then
      segments[#segments + 1], cur = cur, ''
    end
  end
  eq(2, #segments, 'text segments around the tool call')
  eq(run.messages[#run.messages].content.text, table.concat(segments), 'segments')
  eq(segments[1], lines[row - 1], 'text before the tool line')
  eq(segments[2], lines[row + 2], 'text after the tool output')
end)

test("view = 'float' streams a thinking run into a float, the thought folded", function()
  pi_bridge.setup(vim.tbl_extend('force', options, { view = 'float' }))
  local ok, err = pcall(function()
    local run = handlers.get(pi_bridge.run('Think, then answer', { model = 'thinking' }))
    local win = truthy(vim.fn.win_findbuf(run.buf)[1], 'run buffer not shown')
    truthy(vim.api.nvim_win_get_config(win).relative ~= '', 'not a float')
    wait_done(run)
    eq('completed', run.status, 'status')
    local thoughts = messages_of(run, 'assistant.thought')
    truthy(#thoughts > 0, 'no assistant.thought message')
    local lines = vim.api.nvim_buf_get_lines(run.buf, 0, -1, true)
    local row = truthy(vim.fn.index(lines, '▸ thought') + 1, 'no thought line')
    eq('  │ ' .. vim.split(thoughts[1].content.text, '\n')[1], lines[row + 1], 'thought body')
    local closed = vim.api.nvim_win_call(win, function()
      return vim.fn.foldclosed(row + 1)
    end)
    eq(row, closed, 'the thought is a closed fold under its line')
    truthy(buffer_text(run.buf):find(run.messages[#run.messages].content.text, 1, true), 'answer')
    vim.api.nvim_win_close(win, true)
  end)
  pi_bridge.setup(options)
  if not ok then
    error(err, 0)
  end
end)

test(':PiRunSelection sends the selected lines', function()
  local buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(buf)
  vim.api.nvim_buf_set_lines(buf, 0, -1, true, { 'local x = 1', 'return x + 1', 'unused' })
  vim.cmd('1,2PiRunSelection What does this return?')
  local run = handlers.latest()
  truthy(run.params.prompt:find('What does this return?', 1, true), 'instruction in the prompt')
  truthy(run.params.prompt:find('local x = 1\nreturn x + 1\n```', 1, true), 'lines in the prompt')
  truthy(not run.params.prompt:find('unused', 1, true), 'only the range')
  wait_done(run)
  eq('completed', run.status, 'status')
end)

test('invalid params end the run with the -32602 error', function()
  local run = handlers.get(pi_bridge.run('x', { thinking = 'bogus' }))
  wait_done(run, 20000)
  eq('error', run.status, 'status')
  eq(-32602, run.error.code, 'error code')
  truthy(
    tostring(run.error.message):find('thinking'),
    'message names the field: ' .. vim.inspect(run.error)
  )
end)

test(':PiCancel mid-tool ends the run as cancelled and leaves no process', function()
  local nvim_pid = vim.fn.getpid()
  local run = handlers.get(pi_bridge.run('Run the slow tool', { model = 'toolslow' }))
  wait_for('tool.call', 60000, function()
    return #messages_of(run, 'tool.call') > 0 or run.done
  end)
  truthy(not run.done, 'run ended before its tool: ' .. run.status)
  local sleep_pid
  wait_for('`sleep 30` to run', 20000, function()
    for _, pid in ipairs(descendants(nvim_pid)) do
      if cmdline(pid):match('^%S*sleep 30$') then
        sleep_pid = pid
        return true
      end
    end
  end)
  -- The run's tree: the bridge's child above `sleep 30`, and everything under it.
  local chain, pid = {}, sleep_pid
  while pid and pid ~= nvim_pid do
    table.insert(chain, 1, pid)
    pid = (proc_stat(pid) or {}).ppid
  end
  truthy(pid == nvim_pid and #chain >= 3, 'sleep is not under the bridge: ' .. vim.inspect(chain))
  local run_root = chain[2] -- chain[1] is the bridge
  local tree = { run_root }
  vim.list_extend(tree, descendants(run_root))
  local starts, names = {}, {}
  for _, p in ipairs(tree) do
    starts[p] = (proc_stat(p) or {}).start
    names[p] = ('%d(%s)'):format(p, vim.fs.basename(vim.split(cmdline(p), ' ')[1]))
  end

  local t0 = vim.uv.hrtime()
  vim.cmd('PiCancel')
  eq('cancelling', run.status, 'status right after :PiCancel')
  wait_done(run, 20000)
  wait_for('the pi/cancel answer', 20000, function()
    return run.cancel_result ~= nil
  end)
  local elapsed_ms = (vim.uv.hrtime() - t0) / 1e6
  eq('cancelled', run.status, 'status')
  check_seq(run)
  eq('terminal.cancelled', run.messages[#run.messages].type, 'last message')
  truthy(elapsed_ms < 15000, ('cancel took %d ms'):format(elapsed_ms))
  eq(true, run.cancel_result.found, 'pi/cancel found the run')
  local receipt = truthy(run.shutdown, 'no shutdown receipt')
  eq({}, receipt.survivors, 'survivors in the receipt')
  local survivors = {}
  for _, p in ipairs(tree) do
    if alive(p, starts[p]) then
      survivors[#survivors + 1] = names[p] .. ' ' .. cmdline(p)
    end
    truthy(
      vim.tbl_contains(receipt.pids, p),
      ('%s missing from the receipt %s'):format(names[p], vim.inspect(receipt.pids))
    )
  end
  eq({}, survivors, 'processes of the run still alive')
  local tool_done = messages_of(run, 'tool.completed')[1] or messages_of(run, 'tool.failed')[1]
  eq(true, tool_done and tool_done.content.cancelled, 'the tool is closed as cancelled')
  local text = buffer_text(run.buf)
  truthy(text:find('[cancelled]', 1, true), 'buffer shows the cancel:\n' .. text)
  local client = require('pi_bridge.client').get()
  truthy(client and client.requests[run.request_id] == nil, 'pi/run still pending in vim.lsp')
  say(
    ('    cancel took %d ms; run tree %s; receipt: stage %s, pids %s'):format(
      elapsed_ms,
      table.concat(vim.tbl_values(names), ' '),
      receipt.stage,
      table.concat(receipt.pids, ',')
    )
  )
end)

test('quitting Neovim mid-run leaves no process of the run', function()
  local t0 = vim.uv.hrtime()
  local argv = { vim.v.progpath, '--headless', '-u', 'NONE', '-i', 'NONE', '-l' }
  argv[#argv + 1] = nvim_dir .. '/tests/quit_child.lua'
  local child_env = {
    QUIT_CHILD_ROOT = root,
    QUIT_CHILD_PATH = env.PATH or vim.env.PATH,
    PI_BRIDGE_PYTHON = python,
  }
  local obj = vim.system(argv, { text = true, env = child_env }):wait(90000)
  local quit_ms = (vim.uv.hrtime() - t0) / 1e6
  local line = vim.split(obj.stdout or '', '\n')[1]
  local ok, report = pcall(vim.json.decode, line)
  truthy(
    ok and report.ok,
    ('child nvim: code %s\nstdout: %s\nstderr: %s'):format(obj.code, obj.stdout, obj.stderr)
  )
  eq(0, obj.code, 'exit code of the child nvim')
  truthy(#report.tree >= 3, 'bridge, pi and sleep in the tree: ' .. vim.inspect(report.tree))
  wait_for('every process of the quit nvim to exit', 15000, function()
    for _, p in ipairs(report.tree) do
      if alive(p.pid, p.start) then
        return false
      end
    end
    return true
  end)
  say(
    ('    %d processes under the child nvim; all gone %d ms after it started'):format(
      #report.tree,
      (vim.uv.hrtime() - t0) / 1e6
    )
  )
  truthy(quit_ms < 60000, 'child took ' .. quit_ms .. ' ms')
end)

test(':PiLog opens the bridge log; the help file has a tag per command', function()
  vim.cmd('PiLog')
  eq(log_file, vim.api.nvim_buf_get_name(0), 'log buffer')
  vim.cmd('close')
  local doc = tmp .. '/doc'
  vim.fn.mkdir(doc, 'p')
  vim.fn.writefile(
    vim.fn.readfile(nvim_dir .. '/doc/pi_bridge.txt', 'b'),
    doc .. '/pi_bridge.txt',
    'b'
  )
  vim.cmd('helptags ' .. vim.fn.fnameescape(doc))
  local tags = table.concat(vim.fn.readfile(doc .. '/tags'), '\n')
  for _, name in ipairs({ 'PiRun', 'PiRunSelection', 'PiCancel', 'PiLog', 'PiBridgeInstall' }) do
    truthy(vim.fn.exists(':' .. name) == 2, 'no command ' .. name)
    truthy(tags:find('\n?:' .. name .. '\t'), 'no help tag :' .. name)
  end
end)

test('stopping the client leaves no process of the bridge', function()
  local nvim_pid = vim.fn.getpid()
  local before = descendants(nvim_pid)
  truthy(#before > 0, 'the bridge is not running')
  local starts = {}
  for _, p in ipairs(before) do
    starts[p] = (proc_stat(p) or {}).start
  end
  require('pi_bridge.client').stop()
  wait_for('the bridge and its children to exit', 15000, function()
    for _, p in ipairs(before) do
      if alive(p, starts[p]) then
        return false
      end
    end
    return true
  end)
end)

-- The documented lazy.nvim spec's `build` step, then the plugin on the venv it made. The XDG dirs
-- are a fresh temp dir (tests/run.sh), so stdpath('data') starts empty.
local install = require('pi_bridge.install')
local no_bridge_path = table.concat(
  vim.tbl_filter(function(dir)
    return vim.fn.executable(dir .. '/pi-bridge') == 0
  end, vim.split(env.PATH or vim.env.PATH, ':', { plain = true })),
  ':'
)

--- Stop the bridge, wait until the plugin has seen it exit, then configure it anew.
local function use_config(overrides)
  require('pi_bridge.client').stop(true)
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

-- ------------------------------------------------------------------ runner

local filter = os.getenv('PI_BRIDGE_TEST_FILTER')
local passed, failed = 0, 0
for _, t in ipairs(tests) do
  if not filter or t.name:find(filter) then
    local t0 = vim.uv.hrtime()
    local ok, err = xpcall(t.fn, debug.traceback)
    local secs = (vim.uv.hrtime() - t0) / 1e9
    if ok then
      passed = passed + 1
      say(('ok   %s (%.1fs)'):format(t.name, secs))
    else
      failed = failed + 1
      say(('FAIL %s (%.1fs)\n%s'):format(t.name, secs, err))
    end
  end
end
if (failed > 0 or os.getenv('PI_BRIDGE_TEST_SHOW_LOG')) and vim.fn.filereadable(log_file) == 1 then
  say('--- bridge log (last 40 lines) ' .. log_file)
  say(table.concat(vim.fn.readfile(log_file, '', -40), '\n'))
end
say(('%d passed, %d failed'):format(passed, failed))
require('pi_bridge.client').stop(true)
os.exit(failed == 0 and passed > 0 and 0 or 1)
