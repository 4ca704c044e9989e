-- The plugin's health and contract, and a first :PiRun (run by tests/run.lua with its helpers `h`).
return function(h)
  local root, pi_bridge, handlers, fail, eq = h.root, h.pi_bridge, h.handlers, h.fail, h.eq
  local truthy, wait_for, buffer_text = h.truthy, h.wait_for, h.buffer_text
  local messages_of, check_seq, wait_done = h.messages_of, h.check_seq, h.wait_done
  local test, checkhealth_text, protocol = h.test, h.checkhealth_text, h.protocol

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
end
