-- The bridge's client: document sync with workspace/applyEdit, and its stop leaves no process
-- (run by tests/run.lua).
return function(h)
  local model_server, pi_bridge, eq, truthy = h.model_server, h.pi_bridge, h.eq, h.truthy
  local wait_for, proc_stat, descendants, alive = h.wait_for, h.proc_stat, h.descendants, h.alive
  local test, project, tag = h.test, h.project, h.tag
  local handlers, wait_done, messages_of = h.handlers, h.wait_done, h.messages_of

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

  test("pi's edit of a dirty buffer comes through the editor: the buffer gets it beside the unsaved text, the disk is not written", function()
    -- Real pi on the scripted model's `script` scenario edits a file whose buffer holds unsaved
    -- typing: the bridge, kept in sync by the client, sends workspace/applyEdit instead of writing.
    local path = project .. '/dirty-live-' .. tag .. '.txt'
    vim.fn.writefile({ 'line one', 'line two', 'line three' }, path)
    vim.cmd('tabnew ' .. vim.fn.fnameescape(path))
    local buf = vim.api.nvim_get_current_buf()
    local c
    require('pi_bridge.core.client').with_client(function(got)
      c = got
    end)
    wait_for('the buffer to be attached', 30000, function()
      return c ~= nil and vim.lsp.buf_is_attached(buf, c.id)
    end)
    vim.api.nvim_buf_set_lines(buf, 3, 3, true, { 'typed, not saved' })
    eq(true, vim.bo[buf].modified, 'the buffer is dirty')
    local agent_line = 'line 2, edited by the agent ' .. tag
    local edit = { path = path, edits = { { oldText = 'line two', newText = agent_line } } }
    local run = handlers.get(pi_bridge.run(vim.json.encode({ { 'edit', edit } }), { model = 'script', cwd = project }))
    wait_done(run)
    eq('completed', run.status, 'the edit run (' .. vim.inspect(run.error) .. ')')
    eq({}, messages_of(run, 'tool.failed'), 'no tool failed')
    eq(
      { 'line one', agent_line, 'line three', 'typed, not saved' },
      vim.api.nvim_buf_get_lines(buf, 0, -1, true),
      "the agent's edit and the user's unsaved line, both in the buffer"
    )
    eq(true, vim.bo[buf].modified, 'the buffer is still dirty')
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
end
