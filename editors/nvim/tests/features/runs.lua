-- One-shot runs: their buffer and folds, the float view, a selection, errors, cancel and quit,
-- the log and the help (run by tests/run.lua).
return function(h)
  local nvim_dir, root, python, env, tmp = h.nvim_dir, h.root, h.python, h.env, h.tmp
  local log_file, pi_bridge, handlers, options = h.log_file, h.pi_bridge, h.handlers, h.options
  local say, eq, truthy, wait_for, buffer_text = h.say, h.eq, h.truthy, h.wait_for, h.buffer_text
  local line_with, messages_of, check_seq = h.line_with, h.messages_of, h.check_seq
  local wait_done, alive, run_tree = h.wait_done, h.alive, h.run_tree
  local check_stopped, test, tag = h.check_stopped, h.test, h.tag

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
    argv[#argv + 1] = nvim_dir .. '/tests/support/quit_child.lua'
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
    vim.list_extend(commands, { 'PiMode', 'PiPermissions', 'PiSandbox', 'PiAgent' })
    for _, name in ipairs(commands) do
      truthy(vim.fn.exists(':' .. name) == 2, 'no command ' .. name)
      truthy(tags:find('\n?:' .. name .. '\t'), 'no help tag :' .. name)
    end
  end)
end
