-- Issue 35 in Neovim, against the real bridge, pi and the scripted model (run by tests/run.lua):
-- :PiModel from the agent's own list (pi/models), the words of the tool card, the approval
-- preview and the footers, and the first run without a key.
return function(h)
  local test, eq, truthy, wait_for = h.test, h.eq, h.truthy, h.wait_for
  local pi_bridge, handlers, chat = h.pi_bridge, h.handlers, h.chat

  --- vim.ui.select / vim.ui.input answered by `answer(kind_or_prompt, items, opts)` for the kinds
  --- it answers (non-nil), the run.lua stubs otherwise; returns restore().
  local function answering(answer)
    local select, input = vim.ui.select, vim.ui.input
    vim.ui.select = function(items, opts, on_choice)
      local picked = answer(opts.kind, items, opts)
      if picked == nil then
        return select(items, opts, on_choice)
      end
      on_choice(picked ~= false and picked or nil)
    end
    vim.ui.input = function(opts, on_confirm)
      local typed = answer('input', nil, opts)
      if typed == nil then
        return input(opts, on_confirm)
      end
      on_confirm(typed)
    end
    return function()
      vim.ui.select, vim.ui.input = select, input
    end
  end

  --- Stop the bridge, wait until the plugin has seen it exit, then set the plugin up with `opts`.
  local function use_options(opts)
    require('pi_bridge.core.client').stop(true)
    wait_for('the client to exit', 15000, function()
      return #vim.lsp.get_clients({ name = 'pi_bridge' }) == 0
    end)
    local settled = false
    vim.schedule(function()
      settled = true
    end)
    wait_for('the exit to be handled', 5000, function()
      return settled
    end)
    pi_bridge.setup(opts)
  end

  local function lines_of(buf)
    return vim.api.nvim_buf_get_lines(buf, 0, -1, true)
  end

  test(":PiModel lists the agent's models (pi/models), the current one marked; the pick runs", function()
    chat.new()
    chat.state().provider, chat.state().model = nil, nil -- setup's fake/text, as a user starts
    h.type_and_send('Hello before picking a model')
    h.chat_run_done()
    local shown
    local restore = answering(function(kind, items, opts)
      if kind == 'pi_bridge.model' then
        shown = vim.tbl_map(opts.format_item, items)
        return 'fake/echo'
      elseif kind == 'pi_bridge.thinking' then
        return 'default'
      end
    end)
    local picked = false
    local ok, err = pcall(chat.pick_model, function()
      picked = true
    end)
    wait_for('the model pick', 20000, function()
      return picked or not ok
    end)
    restore()
    truthy(ok, tostring(err))
    local all = table.concat(shown or {}, '\n')
    truthy(all:find('● fake/text', 1, true), 'the current model is not marked:\n' .. all)
    truthy(all:find('  fake/echo', 1, true), 'no fake/echo from the agent:\n' .. all)
    truthy(#shown >= 5, "not the agent's list:\n" .. all)
    truthy(pi_bridge.status():find('fake/echo', 1, true), 'statusline: ' .. pi_bridge.status())
    h.type_and_send('Echo me back')
    local run = h.chat_run_done()
    eq('completed', run.status, 'status')
    eq('echo', run.params.model, 'the run names the picked model')
    local req = h.request_ending_with('Echo me back')
    eq('echo', req.body.model, 'the model pi asked')
    -- The bridge's own `current` follows the run.
    local answered
    chat.load_models(function(e, result)
      answered = { err = e, result = result }
    end)
    wait_for('pi/models', 20000, function()
      return answered ~= nil
    end)
    eq(nil, answered.err, 'pi/models error')
    eq('fake/echo', answered.result.current.provider .. '/' .. answered.result.current.id, 'current')
    chat.state().provider, chat.state().model = nil, nil
  end)

  test(
    'an approval: the card says "waiting for you", the preview lists - before +, a Deny takes a reason and shows ✗',
    function()
      local project = h.tmp .. '/words-' .. h.tag
      vim.fn.mkdir(project, 'p')
      vim.fn.writefile({ 'line one', 'line two', 'line three' }, project .. '/notes.txt')
      local card, prompt, reason_prompt
      local restore = answering(function(kind, items, opts)
        if kind == 'pi_bridge_permission' then
          local run = handlers.latest()
          card = table.concat(lines_of(run.buf), '\n')
          prompt = opts.prompt
          for _, item in ipairs(items) do
            if item.optionId == 'reject-once' then
              return item
            end
          end
        elseif kind == 'input' and opts.prompt:find('Why not?', 1, true) then
          reason_prompt = opts.prompt
          return 'keep line two as it is'
        end
      end)
      local run = handlers.get(pi_bridge.run('Edit the notes', { model = 'edit', cwd = project }))
      h.wait_done(run)
      restore()
      truthy(card and card:find('[waiting for you]', 1, true), 'card while asking:\n' .. tostring(card))
      truthy(not card:find('⚙ [^\n]*%[running%]'), 'the tool line says running while it asks:\n' .. card)
      local minus = prompt:find('  - line two', 1, true)
      local plus = prompt:find('  + line 2, edited', 1, true)
      truthy(minus and plus and minus < plus, 'preview order:\n' .. prompt)
      truthy(reason_prompt, 'no reason asked')
      eq({ 'line one', 'line two', 'line three' }, vim.fn.readfile(project .. '/notes.txt'), 'file')
      local lines = lines_of(run.buf)
      local row
      for i, l in ipairs(lines) do
        if l:find('^⚙ ') then
          row = i
        end
      end
      truthy(row and lines[row]:find('[denied]', 1, true), 'tool line: ' .. tostring(lines[row or 1]))
      local win = truthy(vim.fn.win_findbuf(run.buf)[1], 'the run is not shown')
      local folded = vim.api.nvim_win_call(win, function()
        return vim.fn.foldtextresult(row)
      end)
      truthy(vim.startswith(folded, '✗'), 'fold text of a denial: ' .. folded)
      local failed = vim.tbl_filter(function(m)
        return m.type == 'tool.failed'
      end, run.messages)[1]
      truthy(failed and failed.content.error:find('keep line two as it is', 1, true), 'the reason: ' .. vim.inspect(failed))
      -- The model is told the reason.
      local told = vim.iter(h.model_requests()):any(function(r)
        return vim.json.encode(r.body or {}):find('keep line two as it is', 1, true) ~= nil
      end)
      truthy(told, 'the model was not told the reason')
      -- The footer: done, how long, the tokens, the cost.
      local footer = lines[#lines]
      truthy(footer:match('^── done in [%d.]+ m?s · [%d.]+k? in / [%d.]+k? out tokens · %$%d+%.%d+$'), 'footer: ' .. footer)
    end
  )

  test('an approval can open the proposed diff before deciding', function()
    local approve = require('pi_bridge.ui.approve')
    local params = {
      runId = 'r',
      toolCallId = 't',
      tool = 'edit',
      kind = 'edit',
      title = 'edit notes.txt',
      input = {},
      diff = { path = 'notes.txt', oldText = 'a\nb\n', newText = 'a\nc\n' },
      options = { { optionId = 'allow-once', kind = 'allow_once', name = 'Allow' } },
    }
    local asked, tab_text = 0, nil
    local restore = answering(function(kind, items)
      if kind ~= 'pi_bridge_permission' then
        return nil
      end
      asked = asked + 1
      if asked == 1 then
        return items[#items] -- "Open the diff first"
      end
      local texts = {}
      for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
        texts[#texts + 1] = table.concat(lines_of(vim.api.nvim_win_get_buf(win)), '|')
      end
      tab_text = table.concat(texts, ' <> ')
      return items[1]
    end)
    local answer
    coroutine.resume(coroutine.create(function()
      answer = approve.on_request(nil, params, nil)
    end))
    wait_for('the answer', 5000, function()
      return answer ~= nil
    end)
    restore()
    eq({ optionId = 'allow-once' }, answer, 'answer')
    eq(2, asked, 'asked again after the diff')
    eq('a|b <> a|c', tab_text, 'the diff tab: now, then as pi would leave it')
    vim.cmd('tabclose')
  end)

  test('a stopped run says stopped, how long, and folds its receipt under the footer', function()
    local run = handlers.get(pi_bridge.run('Take your time', { model = 'slow' }))
    wait_for('the first words', 20000, function()
      return run.text ~= ''
    end)
    pi_bridge.cancel(run.id)
    h.wait_done(run)
    eq('cancelled', run.status, 'status')
    local lines = lines_of(run.buf)
    local row
    for i, l in ipairs(lines) do
      if vim.startswith(l, '── stopped') then
        row = i
      end
    end
    truthy(row, 'no stopped footer:\n' .. table.concat(lines, '\n'))
    truthy(lines[row]:match('^── stopped in [%d.]+ m?s'), 'footer: ' .. lines[row])
    truthy(lines[row]:find('zo: receipt', 1, true), 'no way to the receipt: ' .. lines[row])
    truthy(not lines[row]:find('survivors', 1, true), 'bridge words: ' .. lines[row])
    local receipt = table.concat(vim.list_slice(lines, row + 1), '\n')
    truthy(receipt:find('stopped at the %a+ stage'), 'receipt:\n' .. receipt)
    eq('>1', vim.api.nvim_buf_call(run.buf, function()
      return require('pi_bridge.ui.render').foldexpr(row)
    end), 'the footer heads a fold')
  end)

  test('the first run without a key: the chat says what to set and the scripted model to try', function()
    local empty = h.tmp .. '/no-key-agent'
    vim.fn.mkdir(empty, 'p')
    local opts = vim.deepcopy(h.options)
    opts.provider, opts.model = nil, nil
    opts.cmd_env = vim.tbl_extend('force', opts.cmd_env or {}, { PI_CODING_AGENT_DIR = empty })
    use_options(opts)
    local ok, err = pcall(function()
      local run = handlers.get(pi_bridge.run('Hello on a first run'))
      h.wait_done(run)
      eq('failed', run.status, 'status')
      local text = table.concat(lines_of(run.buf), '\n')
      truthy(text:find('✗ auth:', 1, true), 'not an auth failure:\n' .. text)
      truthy(text:find('pi has no model it can use', 1, true), 'no first-run words:\n' .. text)
      truthy(text:find('ANTHROPIC_API_KEY', 1, true), 'no key variable:\n' .. text)
      truthy(text:find("cmd_env = {", 1, true), 'no Neovim option:\n' .. text)
      truthy(text:find("PI_BRIDGE_SCRIPTED_MODEL = '1'", 1, true), 'no scripted model:\n' .. text)
      truthy(text:find(':checkhealth pi_bridge', 1, true), 'no checkhealth:\n' .. text)
    end)
    use_options(h.options)
    truthy(ok, tostring(err))
  end)
end
