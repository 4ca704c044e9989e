-- What the agent shows in the chat: :PiSandbox and :PiMode pickers, its plan, a subagent's calls
-- (run by tests/run.lua).
return function(h)
  local pi_bridge, handlers, eq, truthy = h.pi_bridge, h.handlers, h.eq, h.truthy
  local wait_for, line_with, wait_done = h.wait_for, h.line_with, h.wait_done
  local test, chat, chat_view, project, tag = h.test, h.chat, h.chat_view, h.project, h.tag

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

  test("Claude Code's live plan shows in the chat and its subagent's calls fold under the Task line", function()
    -- The real Claude Code on the bridge's built-in scripted model, whose `script` scenario makes
    -- the calls the prompt lists: tasks created and updated, then a Task whose subagent reads a file.
    local claude_bin = h.root .. '/.tools-claude/node_modules/.bin'
    truthy(vim.fn.executable(claude_bin .. '/claude') == 1, 'no Claude Code in ' .. claude_bin)
    local client = require('pi_bridge.core.client')
    local exits = 0
    client.on_exit(function()
      exits = exits + 1
    end)
    --- Stop the bridge once it is up (a client stopped while it starts fails, at its exit, the
    --- requests queued meanwhile: the next bridge's too), wait for its exit, then set up anew.
    local function use(overrides)
      if client.get() then
        local up = false
        client.with_client(function()
          up = true
        end)
        wait_for('the running client to be up', 30000, function()
          return up
        end)
        local before = exits
        client.stop(true)
        wait_for('the client to exit', 15000, function()
          return exits > before
        end)
      end
      pi_bridge.setup(overrides)
    end
    use(vim.tbl_extend('force', h.options, {
      cmd = { h.python, '-m', 'bridge', '--agent', 'claude', '--scripted-model' },
      cmd_env = { PATH = claude_bin .. ':' .. (h.env.PATH or vim.env.PATH) },
      model = 'script',
    }))
    local ok, err = pcall(function()
      chat.new()
      local notes = project .. '/parser-' .. tag .. '.txt'
      vim.fn.writefile({ 'the parser divides by b ' .. tag }, notes)
      -- Claude Code 2.1's task list (TaskCreate, TaskUpdate; it no longer offers TodoWrite).
      local calls = {}
      for _, subject in ipairs({ 'Read the parser', 'Guard the division', 'Add a test' }) do
        calls[#calls + 1] = { 'TaskCreate', { subject = subject, description = subject, activeForm = subject } }
      end
      calls[#calls + 1] = { 'TaskUpdate', { taskId = '1', status = 'completed' } }
      calls[#calls + 1] = { 'TaskUpdate', { taskId = '2', status = 'in_progress' } }
      local inner = vim.json.encode({ { 'Read', { file_path = notes } } })
      local task = { description = 'Find the division ' .. tag, prompt = inner, subagent_type = 'general-purpose' }
      calls[#calls + 1] = { 'Task', task }
      h.type_and_send(vim.json.encode(calls))
      local run = h.chat_run_done(120000)
      eq('completed', run.status, 'the run (' .. vim.inspect(run.error) .. ')')
      eq({}, h.messages_of(run, 'tool.failed'), 'every call succeeded')
      local buf = chat_view.thread()
      local lines, row = line_with(buf, '▤ plan')
      eq('▤ plan · 1/3 done', lines[row], 'the head counts what is done')
      eq(
        { '  ✓ Read the parser', '  ◐ Guard the division', '  ○ Add a test' },
        vim.list_slice(lines, row + 1, row + 3),
        'each entry with its status'
      )
      local task_lines, task_row = line_with(buf, ': Find the division ' .. tag)
      truthy(task_lines[task_row]:find('[done]', 1, true), 'the parent is done: ' .. task_lines[task_row])
      local child = task_lines[task_row + 1]
      truthy(vim.startswith(child, '  │ ⚙ Read: ') and child:find('[done]', 1, true), 'the child under it: ' .. child)
      local win = truthy(chat_view.thread_win(), 'the thread is not shown')
      local closed = vim.api.nvim_win_call(win, function()
        vim.cmd('normal! zM')
        return vim.fn.foldclosed(task_row + 1)
      end)
      eq(task_row, closed, "the subagent's call is in the parent's closed fold")
    end)
    use(h.options)
    chat.new()
    truthy(ok, tostring(err))
  end)
end
