-- Headless tests of the pi-bridge Neovim plugin against the real bridge, its scripted model and pi.
--
--   nvim --headless -u NONE -i NONE --cmd 'set rtp^=editors/nvim' -l editors/nvim/tests/run.lua
--
-- Env: PI_BRIDGE_PYTHON (python able to run `-m bridge`, default <repo>/.venv/bin/python),
-- PATH with Node 22 and pi first (<repo>/.tools/node_modules/.bin is prepended when present),
-- PI_BRIDGE_TEST_FILTER (Lua patterns separated by `;`: run only matching tests), PI_BRIDGE_TEST_SHOW_LOG (print the
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

-- The scripted model runs beside the bridge (not inside it, as with --scripted-model) so that the
-- tests can read the model requests it records: what pi sent the model, turn by turn.
local agent_dir = tmp .. '/agent'
local requests_file = tmp .. '/model-requests.jsonl'
local model_ready = ''
local model_server = vim.system({
  python,
  '-m',
  'bridge.scripted_model',
  '--agent-dir',
  agent_dir,
  '--record',
  requests_file,
}, {
  cwd = root,
  stdout = function(_, data)
    model_ready = model_ready .. (data or '')
  end,
})
if not vim.wait(30000, function()
  return model_ready:find('\n') ~= nil
end, 20) then
  io.stdout:write('the scripted model did not start\n')
  os.exit(1)
end
env.PI_CODING_AGENT_DIR = agent_dir

-- A user's own pi extension that asks before bash in a project holding `ask-before-bash`: a
-- confirm, then an input. The bash runs only if the answers were yes and "because".
local ASKING_EXTENSION = [[
import { existsSync } from "node:fs";
import { join } from "node:path";
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash" || !existsSync(join(ctx.cwd, "ask-before-bash"))) return undefined;
    const ok = await ctx.ui.confirm("Run this command?", String(event.input.command));
    const why = await ctx.ui.input("Why run it?", "a reason");
    if (ok && why === "because") return undefined;
    return { block: true, reason: `confirmed ${ok}, because ${why}` };
  });
}
]]
vim.fn.mkdir(agent_dir .. '/extensions', 'p')
-- Compaction on the scripted model's short sessions: pi keeps no recent tokens out of a summary.
vim.fn.writefile(
  { vim.json.encode({ compaction = { keepRecentTokens = 1 } }) },
  agent_dir .. '/settings.json'
)
-- A user's prompt template: a `/review-notes` command pi lists.
vim.fn.mkdir(agent_dir .. '/prompts', 'p')
vim.fn.writefile({
  '---',
  'description: Review the notes file',
  '---',
  'Review notes.txt and list what is missing.',
}, agent_dir .. '/prompts/review-notes.md')
vim.fn.writefile(vim.split(ASKING_EXTENSION, '\n'), agent_dir .. '/extensions/asking.ts')

local pi_bridge = require('pi_bridge')
local handlers = require('pi_bridge.core.handlers')
local options = {
  cmd = { python, '-m', 'bridge' },
  cmd_cwd = root,
  cmd_env = env,
  log_file = log_file,
  view = 'split',
  provider = 'fake',
  model = 'text',
}
pi_bridge.setup(options)

--- The user at the bridge's approval prompt: picks the option `approve_with` names (the plugin
--- declares it answers pi/requestPermission, so its conversations start in ask mode).
local approve_with = 'allow-once'
--- ... and at an extension's own dialogs (pi/ask): the choice picked, the text typed.
local ask_answers = { select = 'Yes', input = 'because' }
local approval_prompts = {}
local select_before = vim.ui.select
vim.ui.select = function(items, opts, on_choice)
  if opts and opts.kind == 'pi_bridge_permission' then
    approval_prompts[#approval_prompts + 1] = opts.prompt
    for _, item in ipairs(items) do
      if item.optionId == approve_with then
        return on_choice(item)
      end
    end
    return on_choice(nil)
  end
  if opts and opts.kind == 'pi_bridge_ask' then
    approval_prompts[#approval_prompts + 1] = opts.prompt
    return on_choice(ask_answers.select)
  end
  return select_before(items, opts, on_choice)
end
--- The user at an extension's input dialog: answers `ask_answers.input` (nil: <Esc>).
local input_before = vim.ui.input
vim.ui.input = function(opts, on_confirm)
  if opts and opts.prompt and opts.prompt:find('Why not?', 1, true) then
    return on_confirm('') -- a Deny's optional reason (approve.lua): none given
  end
  if opts and opts.prompt and opts.prompt:find('Why run it?', 1, true) then
    approval_prompts[#approval_prompts + 1] = opts.prompt
    return on_confirm(ask_answers.input)
  end
  return input_before(opts, on_confirm)
end

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

--- The lines of `buf` and the (last) line number holding `needle`; fails when none does.
local function line_with(buf, needle)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, true)
  local row
  for i, l in ipairs(lines) do
    if l:find(needle, 1, true) then
      row = i
    end
  end
  truthy(row, 'no line with ' .. needle .. ':\n' .. table.concat(lines, '\n'))
  return lines, row
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

--- The process tree of the run whose tool runs `command`: the bridge's child above it (pi) and
--- everything under it, with start times (pid reuse) and names.
local function run_tree(nvim_pid, command)
  local tool_pid
  wait_for('`' .. command .. '` to run', 20000, function()
    for _, pid in ipairs(descendants(nvim_pid)) do
      if cmdline(pid):match('^%S*' .. command .. '$') then
        tool_pid = pid
        return true
      end
    end
  end)
  local chain, pid = {}, tool_pid
  while pid and pid ~= nvim_pid do
    table.insert(chain, 1, pid)
    pid = (proc_stat(pid) or {}).ppid
  end
  truthy(
    pid == nvim_pid and #chain >= 3,
    command .. ' is not under the bridge: ' .. vim.inspect(chain)
  )
  local root = chain[2] -- chain[1] is the bridge
  local pids = { root }
  vim.list_extend(pids, descendants(root))
  local starts, names = {}, {}
  for _, p in ipairs(pids) do
    starts[p] = (proc_stat(p) or {}).start
    names[p] = ('%d(%s)'):format(p, vim.fs.basename(vim.split(cmdline(p), ' ')[1]))
  end
  return { root = root, pids = pids, starts = starts, names = names }
end

--- After a cancel: no process of the tree is alive and each is in the receipt, except the
--- conversation's pi itself when the receipt says it was kept (rpc engine: it serves the next turn).
local function check_stopped(tree, receipt)
  eq({}, receipt.survivors, 'survivors in the receipt')
  local survivors = {}
  for _, p in ipairs(tree.pids) do
    if p == tree.root and receipt.agentKept then
      truthy(alive(p, tree.starts[p]), 'the kept pi is alive')
    else
      if alive(p, tree.starts[p]) then
        survivors[#survivors + 1] = tree.names[p] .. ' ' .. cmdline(p)
      end
      truthy(
        vim.tbl_contains(receipt.pids, p),
        ('%s missing from the receipt %s'):format(tree.names[p], vim.inspect(receipt.pids))
      )
    end
  end
  eq({}, survivors, 'processes of the run still alive')
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
  local protocol = require('pi_bridge.core.protocol')
  local schema =
    vim.json.decode(table.concat(vim.fn.readfile(root .. '/docs/protocol.schema.json'), '\n'))
  local defs = schema['$defs']
  local from_schema = vim.tbl_keys(defs.PiMessage.discriminator.mapping)
  local mirrored = vim.tbl_values(protocol.types)
  table.sort(from_schema)
  table.sort(mirrored)
  eq(from_schema, mirrored, 'message types')
  eq(defs.RunParams.properties.thinking.anyOf[1].enum, protocol.THINKING_LEVELS, 'thinking levels')
  for _, method in ipairs(vim.list_extend({ protocol.MESSAGE }, protocol.METHODS)) do
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
  local caps = require('pi_bridge.core.client').get().server_capabilities.experimental.piBridge
  local protocol = require('pi_bridge.core.protocol')
  eq(protocol.METHODS, caps.methods, 'advertised methods')
  eq({ protocol.MESSAGE }, caps.notifications, 'advertised notifications')
  local advertised, mirrored = vim.deepcopy(caps.messageTypes), vim.tbl_values(protocol.types)
  table.sort(advertised)
  table.sort(mirrored)
  eq(advertised, mirrored, 'advertised message types')
  truthy(vim.api.nvim_buf_get_lines(run.buf, 0, 1, true)[1]:find('[completed]', 1, true), 'header')
end)

test('a tool call asks first: Deny runs nothing and the model is told', function()
  approve_with = 'reject-once'
  local before = #approval_prompts
  local run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool' }))
  wait_done(run)
  approve_with = 'allow-once'
  eq('completed', run.status, 'status')
  check_seq(run)
  eq(before + 1, #approval_prompts, 'one approval prompt')
  truthy(approval_prompts[#approval_prompts]:find('echo hi', 1, true), 'prompt names the command')
  local failed = messages_of(run, 'tool.failed')
  eq(1, #failed, 'tool.failed count')
  eq('denied', failed[1].content.reason, 'tool.failed reason')
  eq(0, #messages_of(run, 'tool.completed'), 'nothing ran')
  eq(1, #messages_of(run, 'permission.requested'), 'permission.requested')
  eq('reject', messages_of(run, 'permission.resolved')[1].content.decision, 'decision')
end)

test('the approval prompt shows the whole command, its tail after a marked cut', function()
  approve_with = 'reject-once'
  local before = #approval_prompts
  local command = 'echo ' .. string.rep('harmless-looking-words ', 12) .. '; touch tail-ran.txt'
  local run = handlers.get(pi_bridge.run(command, { model = 'shell' }))
  wait_done(run)
  approve_with = 'allow-once'
  eq('completed', run.status, 'status')
  eq(before + 1, #approval_prompts, 'one approval prompt')
  local prompt = approval_prompts[#approval_prompts]
  local first = vim.split(prompt, '\n', { plain = true })[1]
  truthy(
    first:find(' … ', 1, true) and first:find('touch tail%-ran%.txt$'),
    'one line, the tail kept: ' .. first
  )
  truthy(prompt:find(command, 1, true), 'the whole command is in the prompt:\n' .. prompt)
  eq(0, vim.fn.filereadable(root .. '/tail-ran.txt'), 'nothing ran')
end)

test(':PiMode plan: the next tool call is refused without asking', function()
  local first = handlers.get(pi_bridge.run('Say hello', { model = 'text' }))
  wait_done(first)
  local answered
  require('pi_bridge.ui.approve').set_mode(first.session_id, 'plan', function(err, result)
    answered = { err = err, result = result }
  end)
  wait_for('pi/setMode', 10000, function()
    return answered ~= nil
  end)
  eq(nil, answered.err, 'pi/setMode error')
  eq('plan', answered.result.mode, 'mode')
  local before = #approval_prompts
  local run =
    handlers.get(pi_bridge.run('Run echo hi', { model = 'tool', sessionId = first.session_id }))
  wait_done(run)
  eq('completed', run.status, 'status')
  eq(before, #approval_prompts, 'plan mode asks nothing')
  local failed = messages_of(run, 'tool.failed')
  eq(1, #failed, 'tool.failed count')
  truthy(failed[1].content.error:find('plan mode', 1, true), failed[1].content.error)
end)

--- The `sandbox` of a run's session.started message.
--- Every vim.notify message goes into the returned list until the returned restore() is called.
local function capture_notes()
  local notes, real = {}, vim.notify
  vim.notify = function(msg)
    notes[#notes + 1] = msg
  end
  return notes, function()
    vim.notify = real
  end
end

local function started_sandbox(run)
  local started = messages_of(run, 'session.started')[1]
  return truthy(started, 'no session.started').content.sandbox
end

test("setup's sandbox confines a run: session.started says bwrap, the mode, no network", function()
  local sandbox = require('pi_bridge.core.sandbox')
  local notes, restore_notify = capture_notes()
  local ok, err = pcall(function()
    pi_bridge.setup(vim.tbl_extend('force', options, { sandbox = { mode = 'workspace-write' } }))
    eq({ mode = 'workspace-write', network = false }, pi_bridge.config().sandbox, 'config')
    local run = handlers.get(pi_bridge.run('Say hello', { model = 'text' }))
    eq({ mode = 'workspace-write', network = false }, run.params.sandbox, 'pi/run sandbox')
    wait_done(run)
    eq('completed', run.status, 'status')
    local capability = truthy(sandbox.capability(), 'initialize says nothing of a sandbox')
    eq(true, capability.available, 'sandbox available: ' .. vim.inspect(capability))
    eq(
      { kind = 'bwrap', mode = 'workspace-write', network = false },
      started_sandbox(run),
      'session.started sandbox'
    )
    -- the statusline shows the conversation's mode beside the sandbox
    local status = pi_bridge.status()
    truthy(status:find('· ask · sandbox workspace-write ·', 1, true), 'status: ' .. status)

    vim.cmd('PiSandbox read-only network')
    eq({ mode = 'read-only', network = true }, sandbox.current(), ':PiSandbox')
    eq({ 'pi_bridge: next runs: sandbox read-only+net' }, notes, ':PiSandbox notifies')
    eq('workspace-write', pi_bridge.config().sandbox.mode, 'the config is left as it was')
    status = pi_bridge.status()
    truthy(status:find('sandbox read-only+net', 1, true), 'status: ' .. status)
    local next_run = handlers.get(pi_bridge.run('Say hello', { model = 'text' }))
    eq({ mode = 'read-only', network = true }, next_run.params.sandbox, 'next pi/run sandbox')
    wait_done(next_run)
    eq('completed', next_run.status, 'next status')
    eq(
      { kind = 'bwrap', mode = 'read-only', network = true },
      started_sandbox(next_run),
      'next session.started sandbox'
    )

    -- :PiSandbox off is sent as it is (over a bridge default) and is left out of the statusline
    vim.cmd('PiSandbox off')
    local plain = handlers.get(pi_bridge.run('Say hello', { model = 'text' }))
    eq({ mode = 'off', network = true }, plain.params.sandbox, ':PiSandbox off is sent')
    wait_done(plain)
    eq('none', started_sandbox(plain).kind, 'an unconfined run')
    truthy(not pi_bridge.status():find('sandbox', 1, true), 'status: ' .. pi_bridge.status())
    eq(
      { 'off', 'workspace-write', 'read-only' },
      vim.fn.getcompletion('PiSandbox ', 'cmdline'),
      'mode completion'
    )
    eq({ 'network', 'nonetwork' }, vim.fn.getcompletion('PiSandbox read-only ', 'cmdline'), 'net')
    eq({ 'read-only' }, vim.fn.getcompletion('PiSandbox re', 'cmdline'), 'completion of a lead')
  end)
  restore_notify()
  sandbox.set(nil)
  pi_bridge.setup(options)
  truthy(ok, tostring(err))
end)

test('a bad sandbox option at setup is a clear warning and the default holds', function()
  local notes, restore_notify = capture_notes()
  local ok, err = pcall(function()
    local bads = { { mode = 'sealed' }, { network = 'yes' }, { mode = 'off', net = true }, 'on' }
    for _, bad in ipairs(bads) do
      local first = #notes + 1
      pi_bridge.setup(vim.tbl_extend('force', options, { sandbox = bad }))
      local note = notes[first] or ''
      truthy(
        note:find('sandbox', 1, true) and note:find('workspace-write|read-only', 1, true),
        ('a warning names sandbox and its modes for %s: %s'):format(
          vim.inspect(bad),
          vim.inspect(vim.list_slice(notes, first))
        )
      )
      local default = { mode = 'off', network = false }
      eq(default, pi_bridge.config().sandbox, 'default after ' .. vim.inspect(bad))
    end
  end)
  restore_notify()
  pi_bridge.setup(options)
  truthy(ok, tostring(err))
end)

test("an extension's own confirm and input reach the user, and their answers are obeyed", function()
  local project = tmp .. '/asking-project'
  vim.fn.mkdir(project, 'p')
  vim.fn.writefile({}, project .. '/ask-before-bash')
  local before = #approval_prompts
  local run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool', cwd = project }))
  wait_done(run)
  eq('completed', run.status, 'status')
  eq(before + 3, #approval_prompts, 'the approval, then the confirm and the input')
  truthy(
    approval_prompts[before + 2]:find('Run this command?\necho hi', 1, true),
    approval_prompts[before + 2]
  )
  eq(1, #messages_of(run, 'tool.completed'), 'yes and "because": the command ran')

  ask_answers.input = nil -- <Esc> at the input
  run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool', cwd = project }))
  wait_done(run)
  ask_answers.input = 'because'
  eq('completed', run.status, 'status')
  local failed = messages_of(run, 'tool.failed')
  eq(1, #failed, 'tool.failed count')
  truthy(failed[1].content.error:find('because undefined', 1, true), failed[1].content.error)
end)

test('a tool call is one folded line with its status and output', function()
  local run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool' }))
  wait_done(run)
  eq('completed', run.status, 'status')
  check_seq(run)
  eq(1, #messages_of(run, 'tool.call'), 'tool.call count')
  local lines, row = line_with(run.buf, '⚙ bash: echo hi')
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
  local tree = run_tree(nvim_pid, 'sleep 30')

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
  check_stopped(tree, receipt)
  local tool_done = messages_of(run, 'tool.completed')[1] or messages_of(run, 'tool.failed')[1]
  eq(true, tool_done and tool_done.content.cancelled, 'the tool is closed as cancelled')
  local text = buffer_text(run.buf)
  truthy(text:find('[cancelled]', 1, true), 'buffer shows the cancel:\n' .. text)
  local client = require('pi_bridge.core.client').get()
  truthy(client and client.requests[run.request_id] == nil, 'pi/run still pending in vim.lsp')
  say(
    ('    cancel took %d ms; run tree %s; receipt: stage %s, pids %s'):format(
      elapsed_ms,
      table.concat(vim.tbl_values(tree.names), ' '),
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
  local commands = { 'PiRun', 'PiRunSelection', 'PiCancel', 'PiLog', 'PiBridgeInstall' }
  vim.list_extend(commands, { 'PiChat', 'PiSend' })
  vim.list_extend(commands, { 'PiSteer', 'PiStop', 'PiNew', 'PiSessions', 'PiDiff', 'PiModel' })
  vim.list_extend(commands, { 'PiMode', 'PiPermissions', 'PiSandbox' })
  for _, name in ipairs(commands) do
    truthy(vim.fn.exists(':' .. name) == 2, 'no command ' .. name)
    truthy(tags:find('\n?:' .. name .. '\t'), 'no help tag :' .. name)
  end
end)

-- ------------------------------------------------------------------ the chat

local chat = require('pi_bridge.ui.chat')
local chat_view = require('pi_bridge.ui.chat_view')
local protocol = require('pi_bridge.core.protocol')
local project = tmp .. '/project'
vim.fn.mkdir(project, 'p')
local tag = tostring(vim.uv.hrtime() % 1000000)

--- The model requests the scripted model recorded, oldest first.
local function model_requests()
  if vim.fn.filereadable(requests_file) == 0 then
    return {}
  end
  return vim.tbl_map(vim.json.decode, vim.fn.readfile(requests_file))
end

--- The texts of one request's messages of `role`, in order.
local function texts_of(body, role)
  local out = {}
  for _, m in ipairs(body.messages or {}) do
    if m.role == role then
      local c = m.content
      if type(c) == 'table' then
        c = table.concat(vim.tbl_map(function(part)
          return type(part) == 'table' and part.text or ''
        end, c))
      end
      out[#out + 1] = tostring(c or '')
    end
  end
  return out
end

--- The one model request whose last user message is `text`.
local function request_ending_with(text)
  local found = vim.tbl_filter(function(r)
    local users = r.body and texts_of(r.body, 'user') or {}
    return users[#users] == text
  end, model_requests())
  eq(1, #found, 'model requests ending with ' .. text)
  return found[1]
end

local function thread_text()
  return buffer_text(truthy(chat_view.thread(), 'no chat thread'))
end

--- Type `text` into the prompt area and press the send key there (normal mode), as a user does.
local function type_and_send(text)
  if not chat_view.prompt() then -- a test run alone (PI_BRIDGE_TEST_FILTER)
    vim.cmd('cd ' .. vim.fn.fnameescape(project))
    vim.cmd('PiChat')
  end
  local prompt = truthy(chat_view.prompt(), 'no prompt area')
  local win = truthy(vim.fn.win_findbuf(prompt)[1], 'the prompt area is not shown')
  vim.api.nvim_set_current_win(win)
  vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { text })
  vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
end

--- The callback of a buffer-local normal-mode mapping.
local function mapping(buf, lhs)
  local m = vim.api.nvim_buf_call(buf, function()
    return vim.fn.maparg(lhs, 'n', false, true)
  end)
  return truthy(m.callback, 'no mapping ' .. lhs)
end

local function chat_run_done(timeout_ms)
  local run = truthy(chat.state().run, 'no chat run')
  wait_done(run, timeout_ms)
  return run
end

--- vim.ui.select answering with the item `pick(items, labels)` returns; the labels are kept.
local function stub_select(pick)
  local shown = {}
  local real = vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    local labels = vim.tbl_map(opts.format_item or tostring, items)
    shown[#shown + 1] = { prompt = opts.prompt, labels = labels }
    on_choice(pick(items, labels, opts))
  end
  return shown, function()
    vim.ui.select = real
  end
end

test(
  'setup() keys: a remap merges over the defaults, false unmaps, an unknown name is refused',
  function()
    local notes, restore_notify = capture_notes()
    local ok, err = pcall(function()
      pi_bridge.setup(vim.tbl_extend('force', options, { keys = { send = '<C-g>', stop = false } }))
      local keys = pi_bridge.config().keys
      eq('<C-g>', keys.send, 'remapped send')
      eq(false, keys.stop, 'unmapped stop')
      eq('<C-s>', keys.send_insert, 'the other keys keep their default')
      eq({}, notes, 'no warning for valid keys')
      pi_bridge.setup(vim.tbl_extend('force', options, { keys = { sned = 'x' } }))
      truthy(
        notes[1] and notes[1]:find('keys', 1, true),
        'a warning names keys: ' .. vim.inspect(notes)
      )
      eq('<CR>', pi_bridge.config().keys.send, 'defaults after a bad keys table')
    end)
    restore_notify()
    pi_bridge.setup(options)
    truthy(ok, tostring(err))
  end
)

test(
  ':PiChat: a follow-up continues the conversation, the second model request holds the first turn',
  function()
    vim.cmd('cd ' .. vim.fn.fnameescape(project))
    local events = {}
    vim.api.nvim_create_autocmd('User', {
      pattern = { 'PiBridgeRunStarted', 'PiBridgeRunFinished' },
      callback = function(ev)
        events[#events + 1] = ev.match
      end,
    })
    vim.cmd('PiChat')
    local thread, prompt =
      truthy(chat_view.thread(), 'thread'), truthy(chat_view.prompt(), 'prompt')
    eq('nofile', vim.bo[thread].buftype, 'buftype of the thread')
    eq('markdown', vim.bo[thread].filetype, 'filetype of the thread')
    eq(prompt, vim.api.nvim_get_current_buf(), 'the cursor is in the prompt area')
    -- :PiModel picks the echo scenario for the next prompts
    local shown, restore = stub_select(function(items)
      return vim.tbl_contains(items, 'fake/echo') and 'fake/echo' or 'low'
    end)
    pi_bridge.setup(vim.tbl_extend('force', options, { models = { 'fake/text', 'fake/echo' } }))
    local ok, err = pcall(vim.cmd, 'PiModel')
    truthy(ok, tostring(err))
    -- the model picker waits for the agent's list (pi/models)
    wait_for('the model and thinking pickers', 30000, function()
      return #shown >= 2
    end)
    restore()
    eq(2, #shown, 'model and thinking pickers')
    eq('echo', chat.state().model, 'picked model')
    eq('low', chat.state().thinking, 'picked thinking level')

    local first, second = 'first-' .. tag, 'second-' .. tag
    type_and_send(first)
    local run1 = chat_run_done()
    eq('completed', run1.status, 'first turn')
    eq({ '' }, vim.api.nvim_buf_get_lines(prompt, 0, -1, true), 'the prompt area is emptied')
    local sid = truthy(chat.state().session_id, 'no session id after the first turn')
    truthy(chat.status():find('fake/echo', 1, true), 'status names the model: ' .. chat.status())
    truthy(chat.status():find('idle', 1, true), 'status says idle: ' .. chat.status())
    truthy(chat.status():find('ctx %d+%%'), 'status shows the context: ' .. chat.status())
    eq(chat.status(), pi_bridge.status(), "pi_bridge.status() is the chat's")

    vim.cmd('PiSend ' .. second)
    local run2 = chat_run_done()
    eq('completed', run2.status, 'second turn')
    truthy(run2 ~= run1, 'a second run')
    eq(sid, run2.params.sessionId, 'the follow-up names the session')
    eq(sid, chat.state().session_id, 'the same conversation')
    local seen = request_ending_with(second).body
    eq({ first, second }, texts_of(seen, 'user'), "the second request's user messages")
    truthy(
      vim.tbl_contains(texts_of(seen, 'assistant'), 'ECHO:' .. first),
      'the second request holds the first answer: ' .. vim.inspect(texts_of(seen, 'assistant'))
    )
    local lines = vim.api.nvim_buf_get_lines(thread, 0, -1, true)
    local you, pi = {}, {}
    for i, l in ipairs(lines) do
      if l == '## You' then
        you[#you + 1] = i
      elseif l == '## pi' then
        pi[#pi + 1] = i
      end
    end
    eq(2, #you, '## You headers')
    eq(2, #pi, '## pi headers')
    -- the first text line under a `## pi`: a turn sent right after the previous one ended may
    -- first wait for the bridge to finish that one (a `⏸ waiting …` notice, run.queued)
    local function answer_under(row)
      for i = row + 1, #lines do
        if lines[i] ~= '' and not vim.startswith(lines[i], '⏸') then
          return lines[i]
        end
      end
    end
    eq(first, lines[you[1] + 2], 'first prompt under ## You')
    eq('ECHO:' .. first, answer_under(pi[1]), 'first answer under ## pi')
    eq('ECHO:' .. second, answer_under(pi[2]), 'second answer under ## pi')
    -- ]] and [[ jump between the turns
    local win = truthy(chat_view.thread_win(), 'thread window')
    vim.api.nvim_set_current_win(win)
    vim.api.nvim_win_set_cursor(win, { 1, 0 })
    local hops = {}
    for _ = 1, 4 do
      vim.api.nvim_feedkeys(']]', 'x', false)
      hops[#hops + 1] = vim.api.nvim_win_get_cursor(win)[1]
    end
    eq({ you[1], pi[1], you[2], pi[2] }, hops, ']] visits each header')
    vim.api.nvim_feedkeys('[[', 'x', false)
    eq(you[2], vim.api.nvim_win_get_cursor(win)[1], '[[ goes back one header')
    eq(
      { 'PiBridgeRunStarted', 'PiBridgeRunFinished', 'PiBridgeRunStarted', 'PiBridgeRunFinished' },
      events,
      'autocmds'
    )
  end
)

test(
  ':PiSessions lists "(… ago) title", renders the history and continues that conversation',
  function()
    local sid = truthy(chat.state().session_id, 'no conversation from the previous test')
    local first, second, third = 'first-' .. tag, 'second-' .. tag, 'third-' .. tag
    vim.cmd('PiNew')
    eq(nil, chat.state().session_id, ':PiNew forgets the session')
    truthy(not thread_text():find(first, 1, true), ':PiNew empties the thread')
    local shown, restore = stub_select(function(items, _, opts)
      if opts.kind == 'pi_bridge.session_action' then
        eq({ 'open', 'rename', 'delete' }, items, 'the actions on a session')
        return 'open'
      end
      for _, s in ipairs(items) do
        if s.sessionId == sid then
          return s
        end
      end
    end)
    local done
    local ok, err = pcall(function()
      chat.pick_session(function(picked)
        done = picked
      end)
      wait_for('the session to be opened', 20000, function()
        return done ~= nil
      end)
    end)
    restore()
    truthy(ok, tostring(err))
    eq(true, done, 'the session was opened')
    local labels = shown[1].labels
    truthy(
      vim.tbl_contains(labels, '(just now) ' .. first)
        or vim.tbl_contains(labels, '(1 min ago) ' .. first),
      'an entry "(just now) title": ' .. vim.inspect(labels)
    )
    eq(sid, chat.state().session_id, 'the picked conversation')
    local text = thread_text()
    for _, s in ipairs({ first, 'ECHO:' .. first, second, 'ECHO:' .. second }) do
      truthy(text:find(s, 1, true), 'history lacks ' .. s .. ':\n' .. text)
    end
    vim.cmd('PiSend ' .. third)
    local run = chat_run_done()
    eq('completed', run.status, 'the resumed turn')
    eq(sid, run.session_id, 'the resumed turn is in the same session')
    eq(
      { first, second, third },
      texts_of(request_ending_with(third).body, 'user'),
      'the model saw every turn'
    )
  end
)

--- The sessions pi/sessions lists for the project (synchronously, for the tests).
local function list_sessions()
  local answer
  require('pi_bridge.core.client').request(
    'pi/sessions',
    { cwd = vim.fn.getcwd(), limit = 100 },
    function(err, result)
      answer = err and { error = err } or result
    end
  )
  wait_for('pi/sessions', 20000, function()
    return answer ~= nil
  end)
  truthy(not answer.error, 'pi/sessions: ' .. vim.inspect(answer.error))
  return answer.sessions
end

local function session_by_id(sid)
  for _, s in ipairs(list_sessions()) do
    if s.sessionId == sid then
      return s
    end
  end
  return nil
end

test(
  "`/` in the prompt area completes the conversation's commands (omnifunc, the / key)",
  function()
    local commands = require('pi_bridge.ui.commands')
    local prompt = truthy(chat_view.prompt(), 'no prompt area')
    eq(
      "v:lua.require'pi_bridge.ui.commands'.omnifunc",
      vim.bo[prompt].omnifunc,
      "the prompt area's omnifunc"
    )
    local win = truthy(vim.fn.win_findbuf(prompt)[1], 'the prompt area is not shown')
    vim.api.nvim_set_current_win(win)
    -- The `/` key at the start of the prompt opens the menu; what it lists is read from inside
    -- insert mode, then <C-e> closes it and <Esc> leaves insert mode.
    vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { '' })
    _G.pi_test_menu = nil
    vim.api.nvim_feedkeys(
      vim.keycode(
        'i/<Cmd>lua _G.pi_test_menu = vim.fn.complete_info({"items", "mode", "pum_visible"})<CR><C-e><Esc>'
      ),
      'xt',
      false
    )
    local menu = truthy(_G.pi_test_menu, 'no completion info')
    eq('omni', menu.mode, 'the / key started the omni completion')
    eq(1, menu.pum_visible, 'the menu is shown')
    local words = vim.tbl_map(function(i)
      return i.word
    end, menu.items)
    for _, w in ipairs({ '/compact', '/autocompact', '/name', '/export', '/new', '/review-notes' }) do
      truthy(vim.tbl_contains(words, w), w .. ' is offered: ' .. vim.inspect(words))
    end
    local compact = vim.tbl_filter(function(i)
      return i.word == '/compact'
    end, menu.items)[1]
    eq('/compact [instructions]', compact.abbr, 'the argument hint beside the name')
    truthy(compact.menu:find('[bridge]', 1, true), 'the source: ' .. compact.menu)
    local notes = vim.tbl_filter(function(i)
      return i.word == '/review-notes'
    end, menu.items)[1]
    truthy(
      notes.menu:find('[prompt] Review the notes file', 1, true),
      'a prompt template: ' .. notes.menu
    )
    -- Typed further, the list narrows; in the middle of a prompt nothing completes.
    vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { '/autoc' })
    vim.api.nvim_win_set_cursor(win, { 1, 6 })
    eq(0, commands.omnifunc(1, ''), 'the command starts at column 0')
    eq(
      { '/autocompact' },
      vim.tbl_map(function(i)
        return i.word
      end, commands.omnifunc(0, '/autoc')),
      'narrowed to /autoc…'
    )
    vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { 'fix /comp' })
    vim.api.nvim_win_set_cursor(win, { 1, 9 })
    eq(-3, commands.omnifunc(1, ''), 'not at the start of the prompt: no completion')
    -- The nvim-cmp source offers the same list in the prompt area only.
    -- (Normal mode: the cursor stands on the last character, where Insert mode's would follow it.)
    vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { '/c' })
    vim.api.nvim_win_set_cursor(win, { 1, 1 })
    local source = commands.cmp_source()
    eq(true, source:is_available(), 'the cmp source is available in the prompt area')
    local got
    source:complete({}, function(result)
      got = result
    end)
    wait_for('the cmp source', 5000, function()
      return got ~= nil
    end)
    truthy(
      vim.tbl_contains(
        vim.tbl_map(function(i)
          return i.insertText
        end, got.items),
        '/compact'
      ),
      'cmp items: ' .. vim.inspect(got.items)
    )
    vim.api.nvim_buf_set_lines(prompt, 0, -1, true, { '' })
  end
)

test(
  '/compact in the chat: a "Context compacted: N → M tokens" line under a compacting one',
  function()
    chat.state().model = 'text'
    type_and_send('/compact keep the test names')
    local run = chat_run_done(90000)
    eq('completed', run.status, 'the /compact run')
    truthy(#messages_of(run, 'session.compacting') == 1, 'session.compacting streamed')
    local compacted = truthy(messages_of(run, 'session.compacted')[1], 'session.compacted streamed')
    local lines, row = line_with(chat_view.thread(), '── Context compacted: ')
    eq(require('pi_bridge.ui.render').compacted_line(compacted.content), lines[row], 'the line')
    truthy(lines[row]:find('→', 1, true), 'before → after: ' .. lines[row])
    truthy(
      lines[row - 1]:find('── compacting the context (manual)…', 1, true),
      'the compacting line first: ' .. lines[row - 1]
    )
    local sizes = compacted.content
    truthy(
      type(sizes.tokensBefore) == 'number' and type(sizes.tokensAfter) == 'number',
      'both sizes: ' .. vim.inspect(sizes)
    )
    local render = require('pi_bridge.ui.render')
    eq(
      { '950', '1k', '1.5k', '48k' },
      vim.tbl_map(render.tokens, { 950, 1000, 1500, 48213 }),
      'sizes'
    )
    eq(
      '── Context not compacted: aborted',
      render.compacted_line({ error = 'aborted' }),
      'a failure'
    )
  end
)

test('/name in the chat renames the conversation: its title follows session.renamed', function()
  local sid = truthy(chat.state().session_id, 'no conversation')
  local title = 'Named in chat ' .. tag
  type_and_send('/name ' .. title)
  local run = chat_run_done()
  eq('completed', run.status, 'the /name run')
  eq(
    title,
    truthy(messages_of(run, 'session.renamed')[1], 'session.renamed').content.title,
    'title'
  )
  eq(title, chat.state().title, "the chat's title")
  eq(
    '# pi chat: ' .. title,
    vim.api.nvim_buf_get_lines(chat_view.thread(), 0, 1, true)[1],
    'line 1'
  )
  eq(title, truthy(session_by_id(sid), 'the session is listed').title, 'pi/sessions has the title')
end)

test(':PiSessions rename and delete: vim.ui.input gives the title, a confirm deletes', function()
  local sid = truthy(chat.state().session_id, 'no conversation')
  local old_title = chat.state().title
  local title = 'Renamed from PiSessions ' .. tag
  local shown, restore = stub_select(function(items, _, opts)
    if opts.kind == 'pi_bridge.confirm' then
      eq({ 'Delete', 'Keep' }, items, 'the confirm')
      return 'Delete'
    end
    for _, s in ipairs(items) do
      if s.sessionId == sid then
        return s
      end
    end
  end)
  local real_input = vim.ui.input
  local asked
  vim.ui.input = function(opts, on_confirm)
    asked = opts
    on_confirm(title)
  end
  local ok, err = pcall(function()
    vim.cmd('PiSessions rename')
    wait_for('the rename', 20000, function()
      return chat.state().title == title
    end)
    truthy(asked and asked.prompt:find('new title', 1, true), 'vim.ui.input asked for the title')
    eq(old_title, asked.default, 'the current title is the default')
    eq(title, truthy(session_by_id(sid), 'listed').title, 'pi/sessions has the new title')
    eq(
      '# pi chat: ' .. title,
      vim.api.nvim_buf_get_lines(chat_view.thread(), 0, 1, true)[1],
      'line 1'
    )
    vim.cmd('PiSessions delete')
    wait_for('the delete', 20000, function()
      return chat.state().session_id == nil
    end)
  end)
  restore()
  vim.ui.input = real_input
  truthy(ok, tostring(err))
  eq(nil, session_by_id(sid), 'the session is gone from pi/sessions')
  eq('# pi chat', vim.api.nvim_buf_get_lines(chat_view.thread(), 0, 1, true)[1], 'line 1')
  eq(3, #shown, 'pickers: the session twice, the confirm once')
  -- An unknown action is refused with a message, nothing asked.
  local notes, restore_notify = capture_notes()
  local refused
  chat.pick_session(function(r)
    refused = r
  end, 'frobnicate')
  restore_notify()
  eq(false, refused, 'refused')
  truthy(notes[1] and notes[1]:find('open, rename, delete', 1, true), vim.inspect(notes))
end)

test('a send while the chat runs steers it; run.steered shows in the thread', function()
  chat.state().model = 'toolsteer'
  type_and_send('go-' .. tag)
  local run = truthy(chat.state().run, 'no run')
  wait_for('the tool call', 60000, function()
    return #messages_of(run, 'tool.call') > 0 or run.done
  end)
  truthy(not run.done, 'the run ended before its tool: ' .. run.status)
  truthy(chat.status():find('running', 1, true), 'status says running: ' .. chat.status())
  local steer = 'steer-' .. tag
  type_and_send(steer) -- <CR> while the run goes: a steer, not a new turn
  eq(run, chat.state().run, 'no new run')
  wait_done(run, 60000)
  eq('completed', run.status, 'the steered run')
  eq({ steer }, run.steered, 'run.steered')
  truthy(
    thread_text():find('➜ steered: ' .. steer, 1, true),
    'the thread shows the steer:\n' .. thread_text()
  )
  local steered = vim.tbl_filter(function(r)
    return r.body and vim.tbl_contains(texts_of(r.body, 'user'), steer)
  end, model_requests())
  truthy(#steered > 0, 'the model got the steer')
end)

test('a steer of a stopped run goes back to the prompt, never to the next prompt', function()
  chat.state().model = 'slow'
  local client = require('pi_bridge.core.client')
  local real_request = client.request
  local steer_answer
  client.request = function(method, params, on_answer, ...)
    if method ~= protocol.STEER then
      return real_request(method, params, on_answer, ...)
    end
    return real_request(method, params, function(err, result)
      steer_answer = err or result
      on_answer(err, result)
    end, ...)
  end
  local ok, problem = pcall(function()
    type_and_send('divide-' .. tag)
    local run = truthy(chat.state().run, 'no run')
    wait_for('the first delta', 60000, function()
      return #messages_of(run, 'assistant') > 0 or run.done
    end)
    truthy(not run.done, 'the slow run ended early: ' .. run.status)
    local steer = 'Focus on division by zero only ' .. tag
    type_and_send(steer)
    wait_for('the steer answer', 10000, function()
      return steer_answer ~= nil
    end)
    eq(true, steer_answer.accepted, 'the steer was taken: ' .. vim.inspect(steer_answer))
    local prompt_buf = truthy(chat_view.prompt(), 'no prompt area')
    eq({ '' }, vim.api.nvim_buf_get_lines(prompt_buf, 0, -1, true), 'the steer left the prompt')
    chat.stop()
    wait_done(run, 30000)
    wait_for('the pi/cancel answer', 30000, function()
      return run.cancel_result ~= nil
    end)
    eq('cancelled', run.status, 'the stopped run')
    eq({ steer }, run.unsent, 'the cancel handed the steer back')
    local back = vim.api.nvim_buf_get_lines(prompt_buf, 0, -1, true)
    eq({ steer }, back, 'the steer is back in the prompt')
    local thread = thread_text()
    truthy(not thread:find('steered: ' .. steer, 1, true), 'no steer shown:\n' .. thread)

    chat.state().model = 'echo'
    local hello = 'Hello again ' .. tag
    type_and_send(hello)
    local next_run = chat_run_done(60000)
    eq('completed', next_run.status, 'the next prompt')
    eq('ECHO:' .. hello, next_run.text, 'the model answered the new prompt')
    request_ending_with(hello)
    local leaked = vim.tbl_filter(function(r)
      return r.body and table.concat(texts_of(r.body, 'user'), '\n'):find(steer, 1, true) ~= nil
    end, model_requests())
    eq(0, #leaked, 'model requests holding the steer')
  end)
  client.request = real_request
  if not ok then
    error(problem, 0)
  end
end)

test('<C-c> in the chat stops the run; the partial text stays, no process is left', function()
  chat.state().model = 'toolslow'
  type_and_send('slow-' .. tag)
  local run = truthy(chat.state().run, 'no run')
  wait_for('the tool call', 60000, function()
    return #messages_of(run, 'tool.call') > 0 or run.done
  end)
  local tree = run_tree(vim.fn.getpid(), 'sleep 30')
  mapping(chat_view.prompt(), '<C-c>')()
  wait_done(run, 20000)
  eq('cancelled', run.status, 'status')
  wait_for('the pi/cancel answer', 20000, function()
    return run.cancel_result ~= nil
  end)
  check_stopped(tree, truthy(run.shutdown, 'no shutdown receipt'))
  local text = thread_text()
  truthy(text:find('Let me run that command.', 1, true), 'the partial text stays:\n' .. text)
  truthy(text:find('── stopped in', 1, true), 'the thread says stopped:\n' .. text)
  truthy(chat.status():find('idle', 1, true), 'idle after the stop: ' .. chat.status())
end)

test(
  ':PiDiff on an edit line shows the before and after in diff mode; revert restores the file',
  function()
    local original = { 'line one', 'line two', 'line three' }
    local edited = { 'line one', 'line 2, edited', 'line three' }
    local file = project .. '/notes.txt'
    vim.fn.writefile(original, file)
    chat.state().model = 'edit'
    type_and_send('edit-' .. tag)
    local run = chat_run_done()
    eq('completed', run.status, 'the edit run')
    eq(edited, vim.fn.readfile(file), 'pi edited the file')
    local lines, row = line_with(chat_view.thread(), '⚙ edit: notes.txt')
    truthy(lines[row]:find('+1 -1', 1, true), 'the edit line counts +/-: ' .. lines[row])
    local win = chat_view.thread_win()
    local fold = vim.api.nvim_win_call(win, function()
      return vim.fn.foldtextresult(row)
    end)
    truthy(vim.startswith(fold, '✓ edit: notes.txt +1 -1'), 'fold text with ✓: ' .. fold)
    for group, link in pairs(chat_view.highlights) do
      local hl = vim.api.nvim_get_hl(0, { name = group })
      eq(link, hl.link, 'highlight ' .. group .. ' links')
      vim.api.nvim_set_hl(0, group, { fg = '#123456' }) -- a colour scheme's own colour …
      chat_view.define_highlights()
      eq(nil, vim.api.nvim_get_hl(0, { name = group }).link, group .. ' is a default link only')
      vim.api.nvim_set_hl(0, group, { link = link })
    end
    vim.api.nvim_set_current_win(win)
    vim.api.nvim_win_set_cursor(win, { row, 0 })
    local tabs = #vim.api.nvim_list_tabpages()
    vim.cmd('PiDiff')
    eq(tabs + 1, #vim.api.nvim_list_tabpages(), 'a diff tab')
    local wins = vim.api.nvim_tabpage_list_wins(0)
    eq(2, #wins, 'two windows')
    local before, after = vim.api.nvim_win_get_buf(wins[1]), vim.api.nvim_win_get_buf(wins[2])
    for _, w in ipairs(wins) do
      eq(true, vim.wo[w].diff, 'diff mode')
      truthy(
        vim.wo[w].winbar:find(']c/[c', 1, true),
        'the banner lists the keys: ' .. vim.wo[w].winbar
      )
    end
    eq(original, vim.api.nvim_buf_get_lines(before, 0, -1, true), 'before')
    eq(edited, vim.api.nvim_buf_get_lines(after, 0, -1, true), 'after')
    eq(
      vim.fn.resolve(file),
      vim.fn.resolve(vim.api.nvim_buf_get_name(after)),
      'the after is the file'
    )
    local notify = vim.notify
    vim.notify = function() end -- headless prints it without ending the line
    local reverted, revert_err = pcall(mapping(after, 'gR'))
    vim.notify = notify
    truthy(reverted, tostring(revert_err))
    eq(original, vim.fn.readfile(file), 'revert wrote the old text back')
    mapping(after, 'q')()
    eq(tabs, #vim.api.nvim_list_tabpages(), 'q closed the diff tab')
    local left = vim.api.nvim_buf_call(after, function()
      return vim.fn.maparg('q', 'n')
    end)
    eq('', left, "the file's buffer keeps no key of the diff")
    vim.cmd('cd ' .. vim.fn.fnameescape(root))
  end
)

dofile(nvim_dir .. '/tests/rewind.lua')({
  test = test, eq = eq, truthy = truthy, wait_for = wait_for, chat = chat, chat_view = chat_view,
  tmp = tmp, tag = tag, root = root, nvim_dir = nvim_dir, type_and_send = type_and_send,
  chat_run_done = chat_run_done, thread_text = thread_text, texts_of = texts_of,
  request_ending_with = request_ending_with,
})

dofile(nvim_dir .. '/tests/words.lua')({
  test = test, eq = eq, truthy = truthy, wait_for = wait_for, pi_bridge = pi_bridge,
  handlers = handlers, chat = chat, tmp = tmp, tag = tag, options = options,
  type_and_send = type_and_send, chat_run_done = chat_run_done, wait_done = wait_done,
  request_ending_with = request_ending_with, model_requests = model_requests,
})

test(':PiSandbox without arguments picks the mode then the network; :PiMode shows', function()
  local sandbox = require('pi_bridge.core.sandbox')
  local picks, real = { 'workspace-write', 'nonetwork' }, vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    if opts and (opts.kind == 'pi_bridge.sandbox' or opts.kind == 'pi_bridge.sandbox_network') then
      local pick = table.remove(picks, 1)
      truthy(vim.tbl_contains(items, pick), pick .. ' not offered: ' .. vim.inspect(items))
      return on_choice(pick)
    end
    return real(items, opts, on_choice)
  end
  local real_notify = vim.notify
  vim.notify = function() end
  local ok, err = pcall(function()
    vim.cmd('PiSandbox')
    eq({}, picks, 'both picks asked')
    eq({ mode = 'workspace-write', network = false }, sandbox.current(), 'picked sandbox')
    local first = handlers.get(chat.send('Say hello'))
    wait_done(first)
    local answered
    require('pi_bridge.ui.approve').set_mode(first.session_id, 'plan', function(e)
      answered = { err = e }
    end)
    wait_for('pi/setMode', 10000, function()
      return answered ~= nil
    end)
    eq(nil, answered.err, 'pi/setMode error')
    local status = pi_bridge.status()
    truthy(status:find('· plan · sandbox workspace-write ·', 1, true), 'status: ' .. status)
  end)
  vim.ui.select, vim.notify = real, real_notify
  sandbox.set(nil)
  chat.new()
  truthy(ok, tostring(err))
end)

--- Feed `messages` (contract messages as the bridge sends them) into the chat thread as one run.
local function replay_in_chat(messages)
  if not chat_view.prompt() then
    vim.cmd('cd ' .. vim.fn.fnameescape(project))
    vim.cmd('PiChat')
  end
  local run = { id = 'replayed-' .. tag, buf = truthy(chat_view.thread(), 'no chat thread') }
  for i, m in ipairs(messages) do
    require('pi_bridge.ui.render').message(run, { runId = run.id, attempt = 1, seq = i, type = m[1], content = m[2] })
  end
  return run.buf
end

test("the agent's plan shows in the chat, redrawn in place as it changes", function()
  local function plan(statuses)
    local entries = {}
    for i, text in ipairs({ 'Read the parser', 'Fix division by zero', 'Run the tests' }) do
      entries[i] = { content = text, status = statuses[i] }
    end
    return { 'plan', { entries = entries } }
  end
  -- As Claude Code's TodoWrite comes: its call, the plan, then the call's output above the plan.
  local buf = replay_in_chat({
    { 'tool.call', { toolCallId = 'todo', name = 'TodoWrite', arguments = { todos = {} } } },
    plan({ 'completed', 'in_progress', 'pending' }),
    { 'tool.completed', { toolCallId = 'todo', name = 'TodoWrite', output = 'Todos updated' } },
    { 'assistant', { text = 'Fixing it now.' } },
    plan({ 'completed', 'completed', 'in_progress' }),
  })
  local lines, row = line_with(buf, '▤ plan')
  eq('▤ plan · 2/3 done', lines[row], 'the head counts what is done')
  eq(
    { '  ✓ Read the parser', '  ✓ Fix division by zero', '  ◐ Run the tests', 'Fixing it now.' },
    vim.list_slice(lines, row + 1, row + 4),
    'each entry with its status, once, the text after it kept'
  )
  truthy(lines[row - 2]:find('⚙ TodoWrite', 1, true), 'the call above: ' .. lines[row - 2])
  eq('  │ Todos updated', lines[row - 1], "the call's output stays under its own line")
  local heads = vim.tbl_filter(function(l)
    return vim.startswith(l, '▤ plan')
  end, lines)
  eq(1, #heads, 'one plan, replaced in place')
end)

test("a subagent's tool calls are folded under its parent's line, its output after them", function()
  local buf = replay_in_chat({
    { 'tool.call', { toolCallId = 'task', name = 'Task', arguments = { description = 'Find the division' } } },
    { 'tool.call', { toolCallId = 'c1', name = 'Grep', arguments = { pattern = ' / ' }, parentToolCallId = 'task' } },
    { 'tool.completed', { toolCallId = 'c1', name = 'Grep', output = 'parser.py:12' } },
    { 'tool.call', { toolCallId = 'c2', name = 'Read', arguments = { path = 'parser.py' }, parentToolCallId = 'task' } },
    { 'tool.completed', { toolCallId = 'c2', name = 'Read', output = 'x = a / b' } },
    { 'tool.completed', { toolCallId = 'task', name = 'Task', output = 'parser.py line 12 divides' } },
    { 'assistant', { text = 'The parser divides on line 12.' } },
  })
  local lines, row = line_with(buf, 'Task: Find the division')
  truthy(lines[row]:find('[done]', 1, true), 'the parent is done: ' .. lines[row])
  eq({
    '  │ ⚙ Grep: {"pattern":" / "}  [done]',
    '  │ ⚙ Read: parser.py  [done]',
    '  │ parser.py line 12 divides',
    'The parser divides on line 12.',
  }, vim.list_slice(lines, row + 1, row + 4), "the children, then the parent's output")
  local win = truthy(chat_view.thread_win(), 'the thread is not shown')
  local closed = vim.api.nvim_win_call(win, function()
    vim.cmd('normal! zM')
    return { vim.fn.foldclosed(row + 1), vim.fn.foldclosed(row + 2) }
  end)
  eq({ row, row }, closed, "the subagent's calls are in the parent's closed fold")
end)

test('a file the user opens is synced with the bridge; workspace/applyEdit edits its dirty buffer and keeps the unsaved text', function()
  local client = require('pi_bridge.core.client')
  local c
  client.with_client(function(got)
    c = got
  end)
  wait_for('the client', 30000, function()
    return c ~= nil
  end)
  eq(true, c.config.capabilities.workspace.applyEdit, 'initialize declares workspace.applyEdit')
  local path = project .. '/dirty-' .. tag .. '.txt'
  vim.fn.writefile({ 'line one', 'line two', 'line three' }, path)
  vim.cmd('tabnew ' .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  wait_for('the buffer to be attached', 5000, function()
    return vim.lsp.buf_is_attached(buf, c.id)
  end)
  vim.api.nvim_buf_set_lines(buf, 2, 3, true, { 'line three, typed and not saved' })
  eq(true, vim.bo[buf].modified, 'the buffer is dirty')
  -- What the bridge sends for an agent's write to an open, dirty file (a server request).
  local edit = {
    changes = {
      [vim.uri_from_fname(path)] = {
        { range = { start = { line = 1, character = 5 }, ['end'] = { line = 1, character = 8 } }, newText = '2, edited' },
      },
    },
  }
  local answer = vim.lsp.handlers['workspace/applyEdit'](nil, { label = 'pi: write', edit = edit }, { client_id = c.id, method = 'workspace/applyEdit' })
  eq(true, answer and answer.applied, 'applied')
  eq(
    { 'line one', 'line 2, edited', 'line three, typed and not saved' },
    vim.api.nvim_buf_get_lines(buf, 0, -1, true),
    "the agent's edit and the user's unsaved line, both in the buffer"
  )
  eq({ 'line one', 'line two', 'line three' }, vim.fn.readfile(path), 'nothing written behind the buffer')
  vim.cmd('bwipeout! ' .. buf)
end)

test('stopping the client leaves no process of the bridge', function()
  local nvim_pid = vim.fn.getpid()
  local model = { [model_server.pid] = true } -- the scripted model is the tests', not the bridge's
  for _, p in ipairs(descendants(model_server.pid)) do
    model[p] = true
  end
  local before = vim.tbl_filter(function(p)
    return not model[p]
  end, descendants(nvim_pid))
  truthy(#before > 0, 'the bridge is not running')
  local starts = {}
  for _, p in ipairs(before) do
    starts[p] = (proc_stat(p) or {}).start
  end
  require('pi_bridge.core.client').stop()
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

-- ------------------------------------------------------------------ runner

local filter = os.getenv('PI_BRIDGE_TEST_FILTER')
local passed, failed = 0, 0
for _, t in ipairs(tests) do
  local wanted = not filter
    or vim.iter(vim.split(filter, ';', { plain = true })):any(function(f)
      return t.name:find(f) ~= nil
    end)
  if wanted then
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
require('pi_bridge.core.client').stop(true)
model_server:kill(15)
model_server:wait(5000)
os.exit(failed == 0 and passed > 0 and 0 or 1)
