-- :PiRewind's tests, run by tests/run.lua with its helpers (`t`): against the real bridge, pi and
-- the scripted model, two chat turns change files (an edit, a new file), the user changes one of
-- them after, then :PiRewind through vim.ui.select: the preview tab (the list, the diff split of
-- the checkpoint's text against the file's) before the confirm, a files rewind that keeps the
-- user's change, a forced files-and-conversation rewind, and the chat going on in the new session.
return function(t)
  local rewind = require('pi_bridge.ui.rewind')
  local chat, chat_view = t.chat, t.chat_view
  local eq, truthy = t.eq, t.truthy
  local project = t.tmp .. '/rewind-project'
  local first, second = 'rewind-first-' .. t.tag, 'rewind-second-' .. t.tag
  local original = { 'line one', 'line two', 'line three' }
  local edited = { 'line one', 'line 2, edited', 'line three' }
  local users = { 'line one', 'line 2, edited', 'line three', 'the user was here' }

  --- The chat's run once it has ended and the bridge has answered its pi/run (the bridge records
  --- the turn's checkpoint before it answers).
  local function turn_done()
    local run = t.chat_run_done()
    t.wait_for('the pi/run answer', 20000, function()
      return run.result ~= nil or run.error ~= nil
    end)
    return run
  end

  --- Run :PiRewind with vim.ui.select answered by `answers[kind](items, labels)`; returns the
  --- pi/rewind answer and the prompts shown, by kind.
  local function pi_rewind(answers)
    local shown, real, notify = { notes = {} }, vim.ui.select, vim.notify
    vim.notify = function(msg) -- headless prints it without ending the line
      table.insert(shown.notes, msg)
    end
    vim.ui.select = function(items, opts, on_choice)
      local labels = vim.tbl_map(opts.format_item or tostring, items)
      shown[opts.kind] = { prompt = opts.prompt, labels = labels }
      local answer = truthy(answers[opts.kind], 'an unexpected picker: ' .. tostring(opts.kind))
      on_choice(answer(items, labels))
    end
    local result, done
    local ok, err = pcall(function()
      rewind.pick(function(r)
        result, done = r, true
      end)
      t.wait_for(':PiRewind to finish', 30000, function()
        return done
      end)
    end)
    vim.ui.select, vim.notify = real, notify
    truthy(ok, tostring(err))
    return result, shown
  end

  local function the_second(items)
    for _, c in ipairs(items) do
      if c.prompt == second then
        return c
      end
    end
  end

  local function what(name)
    return function(items)
      for _, c in ipairs(items) do
        if c.what == name then
          return c
        end
      end
    end
  end

  --- The preview's list lines and the lines of its two diff windows, while it is open.
  local function preview_now()
    local p = truthy(rewind.preview(), 'no preview open at the confirm')
    eq(p.tab, vim.api.nvim_get_current_tabpage(), 'the preview is the current tab')
    for _, win in ipairs({ p.before_win, p.after_win }) do
      eq(true, vim.wo[win].diff, 'the preview diff windows are in diff mode')
    end
    return {
      list = vim.api.nvim_buf_get_lines(p.list_buf, 0, -1, true),
      before = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(p.before_win), 0, -1, true),
      after = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(p.after_win), 0, -1, true),
      after_name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(p.after_win)),
    }
  end

  local name = ':PiRewind previews the files in a diff split, keeps a conflict, then rewinds'
  t.test(name .. ' files and conversation', function()
    vim.fn.mkdir(project, 'p')
    vim.cmd('cd ' .. vim.fn.fnameescape(project))
    local notes, created = project .. '/notes.txt', project .. '/created/new.txt'
    vim.fn.writefile(original, notes)
    chat.new()
    vim.cmd('PiChat')
    chat.state().model = 'edit'
    t.type_and_send(first)
    eq('completed', turn_done().status, 'the edit turn')
    eq(edited, vim.fn.readfile(notes), 'turn 1 edited notes.txt')
    chat.state().model = 'write'
    t.type_and_send(second)
    eq('completed', turn_done().status, 'the write turn')
    eq({ 'first line', 'second line' }, vim.fn.readfile(created), 'turn 2 created the file')
    local session = truthy(chat.state().session_id, 'no session')
    local tabs = #vim.api.nvim_list_tabpages()

    -- Files only: the preview lists the new file and the conflict; Restore keeps the conflict.
    local seen
    local result, shown = pi_rewind({
      ['pi_bridge.checkpoint'] = function(items)
        -- Listed, turn 2's checkpoint is recorded: the user changes notes.txt after it.
        vim.fn.writefile(users, notes)
        return the_second(items)
      end,
      ['pi_bridge.rewind_what'] = what('files'),
      ['pi_bridge.rewind_confirm'] = function(items)
        seen = preview_now()
        eq(false, items[1].force, 'the first choice keeps the conflicts')
        return items[1]
      end,
    })
    local labels = shown['pi_bridge.checkpoint'].labels
    eq(2, #labels, 'both checkpoints are offered: ' .. vim.inspect(labels))
    local newest = second .. ' · changed created/new.txt'
    truthy(labels[1]:find(newest, 1, true), 'newest first: ' .. labels[1])
    truthy(labels[2]:find(first .. ' · changed notes.txt', 1, true), labels[2])
    local list = vim.inspect(seen.list)
    truthy(seen.list[3]:find('^%- created/new%.txt'), 'the new file will be removed: ' .. list)
    truthy(seen.list[4]:find('^! notes%.txt.*conflict'), 'the conflict is shown as such: ' .. list)
    eq({ '' }, seen.before, 'created/new.txt did not exist at the checkpoint')
    eq({ 'first line', 'second line' }, seen.after, 'the file now')
    local force = shown['pi_bridge.rewind_confirm'].labels[2]
    truthy(force:find('overwrite the conflicts', 1, true), 'a force choice: ' .. force)
    truthy(result, 'the rewind answered')
    eq(
      { { 'created/new.txt' }, { 'notes.txt' } },
      { result.restored, result.conflicts },
      'restored, conflicts'
    )
    eq(0, vim.fn.filereadable(created), 'the new file is removed')
    eq(users, vim.fn.readfile(notes), "the user's change is kept")
    eq(session, chat.state().session_id, 'a files rewind keeps the conversation')
    eq(tabs, #vim.api.nvim_list_tabpages(), 'the preview tab is closed')
    eq(
      { 'pi_bridge: restored 1 file; kept 1 changed after the checkpoint (notes.txt)' },
      shown.notes,
      'what the rewind says'
    )

    -- Files and conversation, overwriting the conflict: the diff split of notes.txt first.
    result = pi_rewind({
      ['pi_bridge.checkpoint'] = the_second,
      ['pi_bridge.rewind_what'] = what('both'),
      ['pi_bridge.rewind_confirm'] = function(items)
        seen = preview_now()
        return items[2]
      end,
    })
    truthy(seen.list[3]:find('^! notes%.txt'), vim.inspect(seen.list))
    eq(edited, seen.before, 'notes.txt at the checkpoint')
    eq(users, seen.after, 'notes.txt now')
    eq(vim.fn.resolve(notes), vim.fn.resolve(seen.after_name), 'the right side is the file')
    truthy(result, 'the forced rewind answered')
    eq(edited, vim.fn.readfile(notes), 'forced: notes.txt is back as turn 1 left it')
    local new_session = truthy(result.sessionId, 'a session id')
    truthy(new_session ~= session, 'a new session')
    eq(new_session, chat.state().session_id, 'the chat continues in the new session')
    local text = t.thread_text()
    local only_first = text:find(first, 1, true) and not text:find(second, 1, true)
    truthy(only_first, 'the thread shows turn 1 only:\n' .. text)
    local prompt_lines = vim.api.nvim_buf_get_lines(chat_view.prompt(), 0, -1, true)
    eq({ second }, prompt_lines, 'the rewound prompt is back')

    chat.state().model = 'echo'
    local third = 'rewind-third-' .. t.tag
    t.type_and_send(third)
    eq('completed', turn_done().status, 'the turn after the rewind')
    local seen_by_model = t.texts_of(t.request_ending_with(third).body, 'user')
    eq({ first, third }, seen_by_model, 'the model saw turn 1 only')
    vim.cmd('cd ' .. vim.fn.fnameescape(t.root))
  end)

  t.test(':PiRewind without a conversation says so; the help file has its tag', function()
    chat.new()
    local result, shown = pi_rewind({})
    eq(nil, result, 'nothing to rewind')
    truthy(shown.notes[1]:find('no conversation to rewind', 1, true), vim.inspect(shown.notes))
    local help = table.concat(vim.fn.readfile(t.nvim_dir .. '/doc/pi_bridge.txt'), '\n')
    truthy(help:find('*:PiRewind*', 1, true), 'no help tag :PiRewind')
    eq(2, vim.fn.exists(':PiRewind'), 'the command exists')
  end)
end
