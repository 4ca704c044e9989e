--- Run state: the registry of runs, fed by `pi/message` notifications and the requests' answers.
---
--- vim.lsp drops the callback of a request answered with -32800 (RequestCancelled), so a cancelled
--- run is ended by its `terminal.cancelled` message, never by the pi/run answer. Every terminal.*
--- message ends the run's state here; `run.retrying` reopens it for the next attempt, and the pi/run
--- answer, when it comes, only adds what it knows (result, usage) to a run that has already ended.
local client = require('pi_bridge.core.client')
local config = require('pi_bridge.core.config')
local protocol = require('pi_bridge.core.protocol')

local T = protocol.types

local M = {}

--- @class pi_bridge.Run
--- @field id string
--- @field params table the pi/run params sent
--- @field status string starting|running|cancelling|retrying|completed|failed|cancelled|error
--- @field done boolean
--- @field attempt integer
--- @field seq integer last seq seen
--- @field text string assistant text of the current attempt (concatenated deltas)
--- @field messages table[] every pi/message of the run, in order
--- @field session_id string?
--- @field request_id integer? id of the pi/run request
--- @field result table? the pi/run result (completed or failed)
--- @field error table? a JSON-RPC error answering pi/run, or terminal.failed's error
--- @field shutdown table? the shutdown receipt of a cancelled run
--- @field cancel_result table? the pi/cancel answer
--- @field usage table?
--- @field started_ns integer when the run was started (vim.uv.hrtime), for the footer's duration
--- @field ended_ns integer? when it ended
--- @field buf integer? the run's buffer
--- @field sink table? the view drawing the run instead of its own pi:// buffer (the chat); it has
---   the functions of the registered view (set_view) that handlers call: message, status, error,
---   finish
--- @field context_usage table? contextUsage of terminal.completed: tokens, contextWindow, percent
--- @field steered string[] steering messages pi took in (run.steered)
--- @field unsent string[]? what a cancel handed back: sent into the run, never reached the model

--- @type table<string, pi_bridge.Run>
local runs = {}
--- @type string[] run ids, oldest first
local order = {}

--- @param id string
--- @return pi_bridge.Run?
function M.get(id)
  return runs[id]
end

--- Live runs, oldest first.
--- @return pi_bridge.Run[]
function M.live()
  local out = {}
  for _, id in ipairs(order) do
    if not runs[id].done then
      out[#out + 1] = runs[id]
    end
  end
  return out
end

--- @return pi_bridge.Run?
function M.latest_live()
  local live = M.live()
  return live[#live]
end

--- @return pi_bridge.Run?
function M.latest()
  return runs[order[#order]]
end

--- The view of a run shown in its own buffer: the UI registers it (set_view); core draws nothing.
--- @type table?
local default_view

--- Register the view that draws a run without a sink (its functions: open, message, status,
--- error, finish, and optionally give_back).
--- @param view table
function M.set_view(view)
  default_view = view
end

local function view_of(run)
  return run.sink or default_view or error('pi_bridge: no view registered (require pi_bridge.ui)')
end

local function fire(pattern, data)
  vim.api.nvim_exec_autocmds('User', { pattern = pattern, modeline = false, data = data })
end

--- Register a run about to be sent and open its view: its own pi:// buffer shown as `view`, or,
--- given a `sink`, the sink's buffer (the chat's), which `sink.open(run)` prepares.
--- @param params table
--- @param view string
--- @param sink table?
--- @return pi_bridge.Run
function M.start_run(params, view, sink)
  local run = {
    id = params.runId,
    params = params,
    status = 'starting',
    done = false,
    attempt = 1,
    seq = 0,
    text = '',
    messages = {},
    steered = {},
    sink = sink,
    started_ns = vim.uv.hrtime(),
  }
  runs[run.id] = run
  order[#order + 1] = run.id
  if sink then
    sink.open(run)
  else
    view_of(run).open(run, view)
  end
  fire('PiBridgeRunStarted', { runId = run.id })
  return run
end

local function finish(run, status)
  if run.done then
    return
  end
  run.done = true
  run.status = status
  run.ended_ns = vim.uv.hrtime()
  if status == 'cancelled' then
    client.forget_request(run.request_id)
  end
  view_of(run).finish(run)
  local data = { runId = run.id, status = status }
  fire('PiBridgeRunDone', data) -- the older name, kept for existing configs
  fire('PiBridgeRunFinished', data)
end

--- Handler of the `pi/message` notification (vim.lsp handler signature).
function M.on_message(_, msg, _)
  local run = type(msg) == 'table' and runs[msg.runId]
  if not run then
    return -- a run this Neovim did not start (or a malformed message): nothing to show
  end
  if msg.seq ~= run.seq + 1 then
    vim.notify(
      ('pi_bridge: run %s: seq %s after %d'):format(run.id, tostring(msg.seq), run.seq),
      vim.log.levels.WARN
    )
  end
  run.seq = msg.seq
  run.messages[#run.messages + 1] = msg
  local t, content = msg.type, msg.content or {}
  if msg.attempt and msg.attempt ~= run.attempt then
    run.attempt = msg.attempt
    run.text = ''
  end
  if not run.done and run.status ~= 'cancelling' then
    run.status = 'running'
  end

  if t == T.SESSION_STARTED or t == T.SESSION_RESUMED then
    run.session_id = content.sessionId
  elseif t == T.ASSISTANT then
    run.text = run.text .. (content.text or '')
  elseif t == T.TERMINAL_COMPLETED then
    run.usage = content.usage
    run.context_usage = content.contextUsage or run.context_usage
  elseif t == T.TERMINAL_FAILED then
    run.error = content.error
  elseif t == T.TERMINAL_CANCELLED then
    run.shutdown = content.shutdown
  elseif t == T.RUN_RETRYING then
    run.done = false
    run.status = 'retrying'
  elseif t == T.RUN_QUEUED then
    run.status = 'queued'
  elseif t == T.RUN_STEERED then
    run.steered[#run.steered + 1] = content.text
  end

  view_of(run).message(run, msg)
  local status = protocol.terminal_status[t]
  if status then
    finish(run, status)
  end
end

--- The answer of `pi/run` (completed or failed, or a JSON-RPC error other than -32800).
--- @param run pi_bridge.Run
function M.on_run_response(run, err, result)
  if err then
    if err.code == protocol.REQUEST_CANCELLED then
      -- Not reached with vim.lsp (it drops these), kept for clients that deliver them.
      run.shutdown = run.shutdown or (err.data and err.data.shutdown)
      finish(run, 'cancelled')
      return
    end
    run.error = err
    if not run.done then
      view_of(run).error(run, err.message or vim.inspect(err))
    end
    finish(run, 'error')
    return
  end
  run.result = result
  run.usage = result.usage or run.usage
  run.session_id = result.sessionId or run.session_id
  finish(run, result.status)
end

--- Mark a run as being cancelled (before pi/cancel is sent).
--- @param run pi_bridge.Run
function M.cancelling(run)
  if not run.done then
    run.status = 'cancelling'
    view_of(run).status(run)
  end
end

--- The answer of `pi/cancel`.
--- @param run pi_bridge.Run
function M.on_cancel_response(run, err, result)
  run.cancel_result = result
  if err then
    vim.notify(('pi_bridge: cancel %s failed: %s'):format(run.id, err.message), vim.log.levels.WARN)
  elseif result and result.shutdown then
    run.shutdown = run.shutdown or result.shutdown
  end
  local unsent = result and result.unsent
  if type(unsent) == 'table' and #unsent > 0 then
    M.give_back(run, unsent)
  end
end

--- A Stop handed back what was sent into the run and never reached the model (its steers, the
--- runs queued behind it): the run's view puts it back in its input (the chat's prompt area), or
--- it is offered in a notification; `User PiBridgeUnsent` fires with `data = {runId, unsent}`.
--- @param run pi_bridge.Run
--- @param unsent string[]
function M.give_back(run, unsent)
  run.unsent = unsent
  local v = view_of(run)
  if v.give_back then
    v.give_back(run, unsent)
  else
    local texts = table.concat(unsent, ' | ')
    vim.notify('pi_bridge: stopped before it was sent: ' .. texts, vim.log.levels.INFO)
  end
  fire('PiBridgeUnsent', { runId = run.id, unsent = unsent })
end

--- The bridge exited: whatever was live ends as failed.
function M.on_exit(code, signal)
  for _, run in ipairs(M.live()) do
    run.error = {
      kind = 'process',
      message = ('the bridge exited (code %s, signal %s)'):format(code, signal),
    }
    view_of(run).error(run, run.error.message)
    finish(run, 'failed')
  end
end

local run_counter = 0

--- A run id unique to this Neovim.
--- @return string
function M.new_run_id()
  run_counter = run_counter + 1
  return ('nvim-%d-%d-%d'):format(vim.fn.getpid(), os.time(), run_counter)
end

--- Send pi/run with `params` (a runId is added when absent); `sink` draws it instead of a pi://
--- buffer (see start_run).
--- @param params table
--- @param sink table?
--- @return string run_id
function M.start(params, sink)
  params.runId = params.runId or M.new_run_id()
  local run = M.start_run(params, config.get().view, sink)
  client.request(protocol.RUN, params, function(err, result)
    M.on_run_response(run, err, result)
  end, function(request_id)
    run.request_id = request_id
  end)
  return params.runId
end

--- Cancel a run (default: the most recent live one) through `pi/cancel`.
--- @param run_id string?
--- @param on_done fun(err: table?, result: table?)?
function M.cancel(run_id, on_done)
  local run = run_id and M.get(run_id) or M.latest_live()
  if not run or run.done then
    vim.notify('pi_bridge: no live run' .. (run_id and (' ' .. run_id) or ''), vim.log.levels.INFO)
    return
  end
  M.cancelling(run)
  client.request(protocol.CANCEL, { runId = run.id }, function(err, result)
    M.on_cancel_response(run, err, result)
    if on_done then
      on_done(err, result)
    end
  end)
end

client.handle(protocol.MESSAGE, M.on_message)
client.on_exit(M.on_exit)

return M
