-- The shared setup and helpers of the plugin's headless tests (tests/run.lua loads it once): the
-- scripted model beside the bridge, setup(), the user at the approval prompt and the dialogs,
-- the assertions, the process-tree checks, the chat helpers and the runner.
--- @class pi_bridge.TestHelpers
local h = {}

local script = debug.getinfo(1, 'S').source:sub(2)
local nvim_dir = vim.fn.fnamemodify(script, ':p:h:h:h')
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
  -- A second agent for :PiAgent, cheap to run: the fake pi (its `text` scenario answers at once),
  -- and one that is not installed, which the picker shows and refuses.
  init_options = {
    agents = {
      fake = { command = { python, root .. '/tests/fakes/fake_pi.py' }, protocol = 'pi' },
      ghost = { command = { 'pi-bridge-no-such-agent', '--acp' }, protocol = 'acp' },
    },
  },
}
pi_bridge.setup(options)

--- The user at the bridge's approval prompt: picks the option `h.approve_with` names (the plugin
--- declares it answers pi/requestPermission, so its conversations start in ask mode).
h.approve_with = 'allow-once'
--- ... and at an extension's own dialogs (pi/ask): the choice picked, the text typed.
local ask_answers = { select = 'Yes', input = 'because' }
local approval_prompts = {}
local select_before = vim.ui.select
vim.ui.select = function(items, opts, on_choice)
  if opts and opts.kind == 'pi_bridge_permission' then
    approval_prompts[#approval_prompts + 1] = opts.prompt
    for _, item in ipairs(items) do
      if item.optionId == h.approve_with then
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

local procs = dofile(nvim_dir .. '/tests/support/procs.lua')
local proc_stat, cmdline, descendants, alive = procs.stat, procs.cmdline, procs.descendants, procs.alive

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

--- Run the registered tests (tests/support/runner.lua), print `N passed, M failed`,
--- stop the bridge and the scripted model, and exit.
function h.run()
  local passed, failed = dofile(nvim_dir .. '/tests/support/runner.lua')(tests, say)
  if (failed > 0 or os.getenv('PI_BRIDGE_TEST_SHOW_LOG')) and vim.fn.filereadable(log_file) == 1 then
    say('--- bridge log (last 40 lines) ' .. log_file)
    say(table.concat(vim.fn.readfile(log_file, '', -40), '\n'))
  end
  say(('%d passed, %d failed'):format(passed, failed))
  require('pi_bridge.core.client').stop(true)
  model_server:kill(15)
  model_server:wait(5000)
  os.exit(failed == 0 and passed > 0 and 0 or 1)
end

-- Everything above, for the feature files: `local eq, truthy = h.eq, h.truthy`.
for name, value in pairs({
  nvim_dir = nvim_dir,
  root = root,
  python = python,
  env = env,
  tools = tools,
  tmp = tmp,
  log_file = log_file,
  agent_dir = agent_dir,
  requests_file = requests_file,
  model_ready = model_ready,
  model_server = model_server,
  ASKING_EXTENSION = ASKING_EXTENSION,
  pi_bridge = pi_bridge,
  handlers = handlers,
  options = options,
  ask_answers = ask_answers,
  approval_prompts = approval_prompts,
  select_before = select_before,
  input_before = input_before,
  say = say,
  fail = fail,
  eq = eq,
  truthy = truthy,
  wait_for = wait_for,
  buffer_text = buffer_text,
  line_with = line_with,
  messages_of = messages_of,
  check_seq = check_seq,
  wait_done = wait_done,
  proc_stat = proc_stat,
  cmdline = cmdline,
  descendants = descendants,
  alive = alive,
  run_tree = run_tree,
  check_stopped = check_stopped,
  tests = tests,
  test = test,
  checkhealth_text = checkhealth_text,
  capture_notes = capture_notes,
  chat = chat,
  chat_view = chat_view,
  protocol = protocol,
  project = project,
  tag = tag,
  model_requests = model_requests,
  texts_of = texts_of,
  request_ending_with = request_ending_with,
  thread_text = thread_text,
  type_and_send = type_and_send,
  mapping = mapping,
  chat_run_done = chat_run_done,
  stub_select = stub_select,
}) do
  h[name] = value
end

return h
