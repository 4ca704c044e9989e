-- The chat: keys, sending, sessions (pick, rename, delete), steering and stopping, the diff of an
-- edit (run by tests/run.lua).
return function(h)
  local root, pi_bridge, options, eq, truthy = h.root, h.pi_bridge, h.options, h.eq, h.truthy
  local wait_for, line_with, messages_of = h.wait_for, h.line_with, h.messages_of
  local wait_done, run_tree, check_stopped = h.wait_done, h.run_tree, h.check_stopped
  local test, capture_notes, chat = h.test, h.capture_notes, h.chat
  local chat_view, protocol, project, tag = h.chat_view, h.protocol, h.project, h.tag
  local model_requests, texts_of = h.model_requests, h.texts_of
  local request_ending_with, thread_text = h.request_ending_with, h.thread_text
  local type_and_send, mapping, chat_run_done = h.type_and_send, h.mapping, h.chat_run_done
  local stub_select = h.stub_select

  --- The session `sid` among a picker's items.
  local function session_in(items, sid)
    for _, s in ipairs(items) do
      if s.sessionId == sid then
        return s
      end
    end
  end

  --- Send `prompt` in the chat on `model`; the run once its first tool call came (or it ended).
  local function send_until_tool(model, prompt)
    chat.state().model = model
    type_and_send(prompt)
    local run = truthy(chat.state().run, 'no run')
    wait_for('the tool call', 60000, function()
      return #messages_of(run, 'tool.call') > 0 or run.done
    end)
    return run
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
        return session_in(items, sid)
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
      return session_in(items, sid)
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
    local run = send_until_tool('toolsteer', 'go-' .. tag)
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
    local run = send_until_tool('toolslow', 'slow-' .. tag)
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
end
