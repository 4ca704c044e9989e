-- Approvals, permission modes, the sandbox of setup and extension dialogs (run by tests/run.lua).
return function(h)
  local root, tmp, pi_bridge, handlers, options = h.root, h.tmp, h.pi_bridge, h.handlers, h.options
  local ask_answers, approval_prompts, eq = h.ask_answers, h.approval_prompts, h.eq
  local truthy, wait_for, messages_of, check_seq = h.truthy, h.wait_for, h.messages_of, h.check_seq
  local wait_done, cmdline, test, capture_notes = h.wait_done, h.cmdline, h.test, h.capture_notes
  local project = h.project

  test('a tool call asks first: Deny runs nothing and the model is told', function()
    h.approve_with = 'reject-once'
    local before = #approval_prompts
    local run = handlers.get(pi_bridge.run('Run echo hi', { model = 'tool' }))
    wait_done(run)
    h.approve_with = 'allow-once'
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
    h.approve_with = 'reject-once'
    local before = #approval_prompts
    local command = 'echo ' .. string.rep('harmless-looking-words ', 12) .. '; touch tail-ran.txt'
    local run = handlers.get(pi_bridge.run(command, { model = 'shell' }))
    wait_done(run)
    h.approve_with = 'allow-once'
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
end
