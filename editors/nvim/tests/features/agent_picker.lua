-- :PiAgent, the agent of the chat's conversation: the picker over initialize's agents, the run's
-- `agent`, and a switch that starts a new conversation (run by tests/run.lua).
return function(h)
  local eq, truthy, test, chat = h.eq, h.truthy, h.test, h.chat
  local model_requests, thread_text = h.model_requests, h.thread_text
  local type_and_send, chat_run_done, stub_select = h.type_and_send, h.chat_run_done, h.stub_select
  local capture_notes = h.capture_notes
  local FAKE_TEXT = 'Hello from the fake pi. It streams a few deltas.'

  test(':PiAgent picks the agent of the conversation; its runs name it; another one starts anew', function()
    chat.new()
    eq(nil, chat.state().agent, ':PiNew after a resume (an earlier test) leaves that session\'s agent behind')
    local notes, restore_notify = capture_notes()
    local picks = { 'ghost', 'fake' }
    local shown, restore_select = stub_select(function(items, _, opts)
      eq('pi_bridge.agent', opts.kind, 'the picker kind')
      local name = table.remove(picks, 1)
      for _, item in ipairs(items) do
        if item.name == name then
          return item
        end
      end
    end)
    local ok, err = pcall(function()
      vim.cmd('PiAgent') -- (the picker shows once the bridge is up)
      h.wait_for('the agent picker', 30000, function()
        return #notes > 0
      end)
      local labels = shown[1].labels
      eq('● pi', labels[1]:match('^● pi'), 'pi, the default, first and marked: ' .. vim.inspect(labels))
      truthy(vim.tbl_contains(labels, '  fake'), 'the fake offered: ' .. vim.inspect(labels))
      truthy(
        vim.tbl_contains(labels, '  ghost  (not found: pi-bridge-no-such-agent --acp)'),
        'the missing agent shown with why: ' .. vim.inspect(labels)
      )
      eq(nil, chat.state().agent, 'a missing agent is not taken')
      truthy(notes[#notes]:find('cannot pick agent ghost', 1, true), 'said why: ' .. tostring(notes[#notes]))
      vim.cmd('PiAgent')
      eq(2, #shown, 'the picker shown again')
      eq('fake', chat.state().agent, 'picked')
      truthy(chat.status():find('^fake · '), 'the statusline names it: ' .. chat.status())
      local completion = vim.fn.getcompletion('PiAgent ', 'cmdline')
      truthy(
        vim.tbl_contains(completion, 'fake') and vim.tbl_contains(completion, 'pi')
          and not vim.tbl_contains(completion, 'ghost'),
        'completion lists the found agents only: ' .. vim.inspect(completion)
      )
      eq({ 'fake' }, vim.fn.getcompletion('PiAgent fa', 'cmdline'), 'completion of a prefix')

      type_and_send('Which agent is this?')
      local first = chat_run_done(60000)
      eq('fake', first.params.agent, "the run's agent")
      type_and_send('And still?')
      local second = chat_run_done(60000)
      eq('fake', second.params.agent, "the follow-up's agent")
      eq(first.session_id, second.session_id, 'the follow-up continues the conversation')
      local _, count = thread_text():gsub(FAKE_TEXT:gsub('%.', '%%.'), '')
      eq(2, count, 'both answers came from the fake pi')
      local asked = vim.tbl_filter(function(r)
        local users = r.body and h.texts_of(r.body, 'user') or {}
        return vim.tbl_contains(users, 'Which agent is this?') or vim.tbl_contains(users, 'And still?')
      end, model_requests())
      eq({}, asked, 'the model never saw the fake agent\'s prompts')

      vim.cmd('PiAgent pi')
      eq('pi', chat.state().agent, 'picked back')
      eq(nil, chat.state().session_id, 'a new conversation')
      type_and_send('Say hello, pi ' .. h.tag)
      local third = chat_run_done(60000)
      eq('pi', third.params.agent, "the run's agent")
      truthy(third.session_id ~= first.session_id, 'on its own session')
      h.request_ending_with('Say hello, pi ' .. h.tag) -- the model saw pi's prompt, once
      eq(nil, thread_text():find('fake pi', 1, true), "the earlier conversation's thread was cleared")
    end)
    restore_select()
    restore_notify()
    chat.state().picked = nil -- the next tests run the bridge's default agent
    chat.new()
    truthy(ok, tostring(err))
  end)
end
