--- The conversation behind :PiChat: which pi session it continues, its current run, the model and
--- thinking level of the next prompt, and the requests that send, steer, stop, list and resume.
---
--- Drawing is chat_view.lua's (the windows) and render.lua's (each run's messages).
local config = require('pi_bridge.core.config')
local handlers = require('pi_bridge.core.handlers')
local protocol = require('pi_bridge.core.protocol')
local approve = require('pi_bridge.ui.approve')
local commands = require('pi_bridge.ui.commands')
local view = require('pi_bridge.ui.chat_view')
require('pi_bridge.ui') -- the UI registered on core before the chat starts the client

local T = protocol.types

local M = {}

--- @class pi_bridge.Conversation
--- @field session_id string? the pi session follow-ups continue (nil: the next prompt starts one)
--- @field run pi_bridge.Run? the latest run of the conversation
--- @field provider string? picked with :PiModel, applied from the next prompt
--- @field model string?
--- @field thinking string?
--- @field context_usage table? contextUsage of the latest completed run
--- @field title string?
--- @field current_model string? "provider/model" the agent runs, from pi/models' `current`
--- @field mode string? the permission mode :PiMode set (nil: the bridge's default for a new one)
--- @field agent string? the conversation's agent, sent as each run's `agent`: the one :PiAgent
--- picked, or the agent of the session a resume continues (nil: the bridge's defaultAgent)
--- @field picked string? :PiAgent's last pick: the agent of the conversations :PiNew starts
local state = {}

--- The conversation's state (read-only for callers; tests inspect it).
--- @return pi_bridge.Conversation
function M.state()
  return state
end

local function cfg()
  return config.get()
end

local function running()
  return state.run ~= nil and not state.run.done
end

--- Is a run of the conversation going?
--- @return boolean
function M.running()
  return running()
end

--- The sink handlers.lua draws the chat's runs with: render.lua on the thread buffer, plus the
--- conversation's bookkeeping.
local sink = setmetatable({
  open = function(run)
    run.buf = view.thread()
    view.begin_turn(run.params.prompt)
  end,
  message = function(run, msg)
    local c = msg.content or {}
    if (msg.type == T.SESSION_STARTED or msg.type == T.SESSION_RESUMED) and c.sessionId then
      state.session_id = c.sessionId
    elseif msg.type == T.TERMINAL_COMPLETED and c.contextUsage then
      state.context_usage = c.contextUsage
    end
    require('pi_bridge.ui.render').message(run, msg)
    if msg.type == T.SESSION_RENAMED and type(c.title) == 'string' then
      state.title = c.title
      view.set_title(c.title)
    end
  end,
  --- A Stop left these unsent: back in the prompt area, ahead of a draft, to edit or send again.
  give_back = function(_, unsent)
    view.give_back(unsent)
    local count = #unsent == 1 and 'a message' or (#unsent .. ' messages')
    local note = ('pi_bridge: stopped; %s not sent, back in the prompt'):format(count)
    vim.notify(note, vim.log.levels.INFO)
  end,
  finish = function(run)
    state.session_id = state.session_id or run.session_id
    require('pi_bridge.ui.render').finish(run)
    vim.cmd.redrawstatus({ bang = true })
    -- The conversation's own commands (its session's extensions), ready for the next `/`.
    M.load_commands()
    -- The model it ran, for the statusline when setup names none.
    if state.session_id and not (state.model or cfg().model) then
      M.load_models(function() end)
    end
  end,
}, { __index = require('pi_bridge.ui.render') })

local actions -- the functions chat_view maps keys to (set below)

--- Open the chat (the thread and the prompt area) and focus the prompt.
function M.open()
  local c = cfg()
  view.open(c.chat_layout, c.keys, actions, c.slash_complete)
  M.load_commands()
end

--- Fetch the conversation's `/` commands for the prompt's completion. Asked for a conversation
--- without a session, the bridge opens its pi: the first prompt goes there (unless one was sent
--- meanwhile, which started a session of its own).
function M.load_commands()
  if not M.on_default_agent() then
    return
  end
  local agent = state.agent
  commands.refresh(state.session_id, vim.fn.getcwd(), function(_, opened)
    -- (a conversation opened for an agent since unpicked is not the chat's)
    if opened and not state.session_id and not state.run and state.agent == agent then
      state.session_id = opened
      commands.rekey(opened) -- the list is that session's from now on
    end
  end)
end

local function run_params(prompt)
  local c = cfg()
  return {
    prompt = prompt,
    cwd = vim.fn.getcwd(),
    sessionId = state.session_id,
    provider = state.provider or c.provider,
    model = state.model or c.model,
    thinking = state.thinking or c.thinking,
    tools = c.tools,
    liveThoughts = c.live_thoughts or nil,
    sandbox = require('pi_bridge.core.sandbox').run_param(),
    agent = state.agent,
  }
end

--- Send `text` (default: the prompt area's): a new turn of the conversation, or, while a run goes,
--- a steering message for it.
--- @param text string?
--- @return string? run_id of a new turn
function M.send(text)
  M.open()
  text = text or view.take_prompt()
  if vim.trim(text) == '' then
    vim.notify('pi_bridge: the prompt is empty', vim.log.levels.INFO)
    return nil
  end
  if running() then
    M.steer(text)
    return nil
  end
  local run_id = handlers.start(run_params(text), sink)
  state.run = handlers.get(run_id)
  return run_id
end

--- Steer the running run with `text` (pi takes it in after its current tool calls); shown in the
--- thread when `run.steered` arrives.
--- @param text string?
function M.steer(text)
  text = text or view.take_prompt()
  if vim.trim(text) == '' then
    vim.notify('pi_bridge: the steering message is empty', vim.log.levels.INFO)
    return
  end
  if not running() then
    vim.notify('pi_bridge: no run to steer; sending it as a prompt', vim.log.levels.INFO)
    M.send(text)
    return
  end
  local run = state.run --[[@as pi_bridge.Run]]
  require('pi_bridge.core.client').request(
    protocol.STEER,
    { runId = run.id, message = text },
    function(err, result)
      if err or not (result and result.accepted) then
        local why = err and err.message or (result and result.reason) or 'refused'
        vim.notify('pi_bridge: steer not taken (back in the prompt): ' .. why, vim.log.levels.WARN)
        view.give_back({ text }) -- not sent: the user's words stay theirs to send again
      end
    end
  )
end

--- Stop the running run (pi/cancel; its partial text stays in the thread).
function M.stop()
  if not running() then
    vim.notify('pi_bridge: no run to stop', vim.log.levels.INFO)
    return
  end
  handlers.cancel((state.run --[[@as pi_bridge.Run]]).id)
end

--- Start over: the next prompt starts a new pi session.
function M.new()
  if running() then
    M.stop()
  end
  state.session_id, state.run, state.context_usage, state.title = nil, nil, nil, nil
  state.mode, state.current_model = nil, nil
  state.agent = state.picked -- a resumed session's agent was that conversation's alone
  commands.invalidate()
  if view.thread() then
    view.clear()
  end
end

--- Seconds since the epoch of an ISO-8601 UTC timestamp ("2026-12-01T10:04:05.578Z"), or nil.
--- @param iso string?
--- @return integer?
function M.parse_time(iso)
  local y, mo, d, h, mi, s = tostring(iso):match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)')
  if not y then
    return nil
  end
  local t = { year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false }
  local local_epoch = os.time(t --[[@as osdate]])
  -- os.time reads the table as local time: shift by the zone's offset at that moment.
  local utc_as_local = os.time(os.date('!*t', local_epoch) --[[@as osdate]])
  return local_epoch + (local_epoch - utc_as_local)
end

--- "(2 h ago)" for a timestamp, relative to `now` (default: the clock).
--- @param iso string?
--- @param now integer?
--- @return string
function M.ago(iso, now)
  local t = M.parse_time(iso)
  if not t then
    return '(?)'
  end
  local secs = math.max(0, (now or os.time()) - t)
  if secs < 60 then
    return '(just now)'
  elseif secs < 3600 then
    return ('(%d min ago)'):format(math.floor(secs / 60))
  elseif secs < 86400 then
    return ('(%d h ago)'):format(math.floor(secs / 3600))
  end
  return ('(%d d ago)'):format(math.floor(secs / 86400))
end

--- One vim.ui.select entry of a pi/sessions session.
--- @param session table
--- @return string
function M.session_label(session)
  return ('%s %s'):format(
    M.ago(session.updatedAt or session.createdAt),
    session.title or session.sessionId
  )
end

--- Draw a pi/session answer into the (cleared) thread: each turn's prompt and its messages, drawn
--- the way a live run's are.
--- @param answer table
local function draw_history(answer)
  view.clear(answer.title)
  local buf = view.thread() --[[@as integer]]
  local render = require('pi_bridge.ui.render')
  if (answer.omittedTurns or 0) > 0 then
    view.note(('… %d older turns not shown'):format(answer.omittedTurns))
  end
  for i, turn in ipairs(answer.turns or {}) do
    local run = { id = ('history-%d'):format(i), buf = buf, params = { prompt = turn.prompt } }
    view.begin_turn(turn.prompt or '')
    for _, msg in ipairs(turn.messages or {}) do
      render.message(run, msg)
    end
  end
  view.note('── resumed: the next prompt continues this conversation')
end

--- Continue session `session_id`: its history is drawn, the next prompt goes to it.
--- @param session_id string
--- @param on_done fun(ok: boolean)?
function M.resume(session_id, on_done)
  if running() then
    M.stop()
  end
  require('pi_bridge.core.client').request(
    protocol.SESSION,
    { sessionId = session_id },
    function(err, answer)
      if err or not (answer and answer.found) then
        vim.notify(
          'pi_bridge: cannot open session '
            .. session_id
            .. ': '
            .. (err and err.message or 'not found'),
          vim.log.levels.WARN
        )
        if on_done then
          on_done(false)
        end
        return
      end
      state.session_id, state.run, state.context_usage = answer.sessionId, nil, nil
      state.title, state.agent, state.current_model = answer.title, answer.agent, nil
      commands.invalidate()
      M.open()
      draw_history(answer)
      if on_done then
        on_done(true)
      end
    end
  )
end

--- What :PiSessions can do with the session picked.
M.SESSION_ACTIONS = { 'open', 'rename', 'delete' }

local function done_with(on_done, ok)
  if on_done then
    on_done(ok)
  end
end

--- Give session `session_id` the title `title` (pi/renameSession); the chat's first line follows
--- when it is the chat's conversation.
--- @param session_id string
--- @param title string
--- @param on_done fun(ok: boolean)?
function M.rename(session_id, title, on_done)
  title = vim.trim(title or '')
  if title == '' then
    vim.notify('pi_bridge: a title cannot be empty', vim.log.levels.INFO)
    return done_with(on_done, false)
  end
  require('pi_bridge.core.client').request(
    protocol.RENAME_SESSION,
    { sessionId = session_id, title = title },
    function(err, answer)
      if err then
        vim.notify('pi_bridge: rename failed: ' .. tostring(err.message), vim.log.levels.WARN)
        return done_with(on_done, false)
      end
      if state.session_id == session_id then
        state.title = answer and answer.title or title
        view.set_title(state.title)
      end
      vim.notify('pi_bridge: renamed to ' .. ((answer and answer.title) or title))
      done_with(on_done, true)
    end
  )
end

--- Delete session `session_id` (pi/deleteSession); the chat starts over when it was its
--- conversation.
--- @param session_id string
--- @param on_done fun(ok: boolean)?
function M.delete(session_id, on_done)
  require('pi_bridge.core.client').request(
    protocol.DELETE_SESSION,
    { sessionId = session_id },
    function(err, answer)
      if err or not (answer and answer.deleted) then
        local why = err and err.message or 'the bridge did not delete it'
        vim.notify('pi_bridge: delete failed: ' .. tostring(why), vim.log.levels.WARN)
        return done_with(on_done, false)
      end
      if state.session_id == session_id then
        M.new()
      end
      vim.notify('pi_bridge: conversation deleted')
      done_with(on_done, true)
    end
  )
end

--- Run `action` (one of SESSION_ACTIONS) on `session`, asking what it needs (a title, a yes).
local function act(action, session, on_done)
  if action == 'open' then
    return M.resume(session.sessionId, on_done)
  elseif action == 'rename' then
    return vim.ui.input(
      {
        prompt = 'pi: new title: ',
        default = type(session.title) == 'string' and session.title or '',
      },
      function(title)
        if not title then
          return done_with(on_done, false)
        end
        M.rename(session.sessionId, title, on_done)
      end
    )
  end
  vim.ui.select({ 'Delete', 'Keep' }, {
    prompt = ('pi: delete %q for good?'):format(session.title or session.sessionId),
    kind = 'pi_bridge.confirm',
  }, function(answer)
    if answer ~= 'Delete' then
      return done_with(on_done, false)
    end
    M.delete(session.sessionId, on_done)
  end)
end

--- :PiSessions [open|rename|delete]: pick one of this directory's sessions (vim.ui.select, so
--- Telescope, fzf-lua and snacks pickers work), then what to do with it (asked when `action` is
--- nil): continue it, rename it (vim.ui.input) or delete it (confirmed).
--- @param on_done fun(ok: boolean)?
--- @param action string?
function M.pick_session(on_done, action)
  if action and not vim.tbl_contains(M.SESSION_ACTIONS, action) then
    vim.notify(
      ('pi_bridge: :PiSessions %s: not one of %s'):format(
        action,
        table.concat(M.SESSION_ACTIONS, ', ')
      ),
      vim.log.levels.WARN
    )
    return done_with(on_done, false)
  end
  local params = { cwd = vim.fn.getcwd(), limit = cfg().sessions_limit }
  require('pi_bridge.core.client').request(protocol.SESSIONS, params, function(err, answer)
    local sessions = answer and answer.sessions or {}
    if err or #sessions == 0 then
      vim.notify(
        'pi_bridge: ' .. (err and err.message or 'no pi sessions in ' .. params.cwd),
        vim.log.levels.INFO
      )
      return done_with(on_done, false)
    end
    vim.ui.select(sessions, {
      prompt = 'pi: ' .. (action or 'pick a') .. ' conversation',
      kind = 'pi_bridge.session',
      format_item = M.session_label,
    }, function(choice)
      if not choice then
        return done_with(on_done, false)
      end
      if action then
        return act(action, choice, on_done)
      end
      vim.ui.select(M.SESSION_ACTIONS, {
        prompt = 'pi: ' .. M.session_label(choice),
        kind = 'pi_bridge.session_action',
      }, function(picked)
        if not picked then
          return done_with(on_done, false)
        end
        act(picked, choice, on_done)
      end)
    end)
  end)
end

--- "provider/id" of a pi/models entry.
local function model_key(model)
  return model.provider .. '/' .. model.id
end

--- Ask the bridge for the agent's models (`pi/models`) of the chat's conversation; `done(err,
--- result)`. Asked without a session, the bridge opens the conversation's agent, which the first
--- prompt then uses, as `load_commands` does. The answer's `current` feeds the statusline.
--- @param done fun(err: table?, result: table?)
function M.load_models(done)
  if not M.on_default_agent() then
    done({ message = 'the bridge lists the models of its default agent only' }, nil)
    return
  end
  local params = { sessionId = state.session_id, cwd = vim.fn.getcwd() }
  local agent = state.agent
  require('pi_bridge.core.client').request(protocol.MODELS, params, function(err, result)
    if not err and type(result) == 'table' then
      if result.sessionId and not state.session_id and not state.run and state.agent == agent then
        state.session_id = result.sessionId
        commands.rekey(result.sessionId)
      end
      if type(result.current) == 'table' and result.current.provider and result.current.id then
        state.current_model = model_key(result.current)
        vim.cmd.redrawstatus({ bang = true })
      end
    end
    done(err, result)
  end)
end

--- :PiModel: pick the model from the agent's own list (`pi/models`, the current one marked; plus
--- setup's `models` and "other…" to type one), then the thinking level; both apply from the next
--- prompt on.
--- @param on_done fun()?
function M.pick_model(on_done)
  local other = 'other…'
  local function pick_thinking()
    local levels = vim.list_extend({ 'default' }, vim.deepcopy(protocol.THINKING_LEVELS))
    vim.ui.select(
      levels,
      { prompt = 'pi: thinking level', kind = 'pi_bridge.thinking' },
      function(level)
        if level then
          state.thinking = level ~= 'default' and level or nil
        end
        vim.cmd.redrawstatus({ bang = true })
        if on_done then
          on_done()
        end
      end
    )
  end
  local function apply(choice)
    if choice and vim.trim(choice) ~= '' then
      local provider, model = choice:match('^([^/]+)/(.+)$')
      state.provider, state.model = provider, model or vim.trim(choice)
    end
    pick_thinking()
  end
  M.load_models(function(err, result)
    local models = not err and type(result) == 'table' and result.models or {}
    if err then
      vim.notify(
        "pi_bridge: the agent's models are unavailable: " .. (err.message or 'pi/models failed'),
        vim.log.levels.WARN
      )
    end
    -- The model of the next prompt: the one picked or set up, else what the agent runs now.
    local model, provider = state.model or cfg().model, state.provider or cfg().provider
    local chosen = model and (provider and (provider .. '/' .. model) or model) or nil
    local current = chosen or state.current_model
    local items, names = {}, {}
    for _, model in ipairs(models) do
      local key = model_key(model)
      items[#items + 1] = key
      names[key] = model.name ~= model.id and model.name or nil
    end
    for _, key in ipairs(cfg().models) do
      if not vim.tbl_contains(items, key) then
        items[#items + 1] = key
      end
    end
    items[#items + 1] = other
    vim.ui.select(items, {
      prompt = 'pi: model of the next prompts',
      kind = 'pi_bridge.model',
      format_item = function(key)
        if key == other then
          return '  ' .. other
        end
        local mark = key == current and '● ' or '  '
        return mark .. key .. (names[key] and ('  (' .. names[key] .. ')') or '')
      end,
    }, function(choice)
      if choice == other then
        vim.ui.input({ prompt = 'provider/model: ' }, apply)
      else
        apply(choice)
      end
    end)
  end)
end

--- :PiDiff: the diff of the edit (or write) on the cursor's line of the thread.
--- @return table? what diff.open returns
function M.diff_at_cursor()
  local buf = view.thread()
  local win = vim.api.nvim_get_current_win()
  if not buf or vim.api.nvim_win_get_buf(win) ~= buf then
    vim.notify('pi_bridge: :PiDiff works on an edit line of the chat', vim.log.levels.INFO)
    return nil
  end
  local tool = require('pi_bridge.ui.render').tool_at(buf, vim.api.nvim_win_get_cursor(win)[1])
  if not tool or not tool.diff then
    vim.notify('pi_bridge: no edit on this line', vim.log.levels.INFO)
    return nil
  end
  local keys = cfg().keys
  return require('pi_bridge.ui.diff').open(
    tool.diff,
    { revert = keys.diff_revert, close = keys.diff_close }
  )
end

--- Record the mode pi/setMode answered for `session_id` when it is the chat's conversation.
--- @param session_id string?
--- @param mode string
function M.mode_set(session_id, mode)
  if session_id and session_id == state.session_id then
    state.mode = mode
    vim.cmd.redrawstatus({ bang = true })
  end
end

--- The permission mode of the conversation: what :PiMode set, else the one a conversation starts
--- in: `defaultMode` of init_options, else `ask` (this plugin answers approvals, see approve.lua).
--- @return string
function M.mode()
  if state.mode then
    return state.mode
  end
  local default = cfg().init_options.defaultMode
  return type(default) == 'string' and default or 'ask'
end

--- The statusline text: model, permission mode, sandbox (when on), running or idle, context %.
--- @return string
function M.status()
  local c = cfg()
  local model = state.model or c.model
  local provider = state.provider or c.provider
  local parts = { state.agent or 'pi' }
  if model then
    parts[#parts + 1] = provider and (provider .. '/' .. model) or model
  elseif state.current_model then
    parts[#parts + 1] = state.current_model -- what the agent runs (pi/models' current)
  end
  local thinking = state.thinking or c.thinking
  if thinking then
    parts[#parts + 1] = 'thinking ' .. thinking
  end
  parts[#parts + 1] = M.mode()
  parts[#parts + 1] = require('pi_bridge.core.sandbox').status()
  parts[#parts + 1] = running() and 'running' or 'idle'
  local usage = state.context_usage
  if usage and type(usage.percent) == 'number' then
    parts[#parts + 1] = ('ctx %d%%'):format(math.floor(usage.percent + 0.5))
  end
  return table.concat(parts, ' · ')
end

--- Does the chat's conversation run the bridge's default agent? pi/commands and pi/models take no
--- agent: without a session they open the default agent (whose session another agent's run could
--- not continue), and they find the default agent's conversations only, so another agent's
--- conversation asks neither.
--- @return boolean
function M.on_default_agent()
  local default = require('pi_bridge.core.client').bridge.defaultAgent
  return state.agent == nil or state.agent == default
end

--- The agents a run can name, from the bridge's `initialize` answer; `done(agents, default)` once
--- the client is up (each `{name, found, protocol, version, delegates, command}`).
--- @param done fun(agents: table[], default: string?)
function M.agents(done)
  local client = require('pi_bridge.core.client')
  client.with_client(function()
    local info = client.bridge
    done(type(info.agents) == 'table' and info.agents or {}, info.defaultAgent)
  end)
end

--- Why an agent cannot be picked ("" when it can).
--- @param agent table an `agents` entry of initialize
--- @return string
function M.agent_unavailable(agent)
  if agent.found then
    return ''
  end
  return 'not found: ' .. table.concat(agent.command or {}, ' ')
end

--- :PiAgent name: the agent of the chat's conversation from its next prompt. A conversation that
--- ran on (or was resumed from) another agent cannot go on with this one (the bridge refuses a run
--- naming another agent than its session's), so picking another starts a new conversation, as
--- does a session opened ahead of the first prompt. `done(ok)` after the checks.
--- @param name string
--- @param done fun(ok: boolean)?
function M.set_agent(name, done)
  M.agents(function(agents, default)
    local picked
    for _, agent in ipairs(agents) do
      if agent.name == name then
        picked = agent
      end
    end
    local why = not picked and 'no agent named ' .. name or M.agent_unavailable(picked)
    if why ~= '' then
      vim.notify('pi_bridge: cannot pick agent ' .. name .. ': ' .. why, vim.log.levels.WARN)
      return done_with(done, false)
    end
    state.picked = name
    if name == (state.agent or default) then
      return done_with(done, true)
    end
    -- A conversation that ran or was resumed is shown: notify that it is left.
    local had_turns = state.run ~= nil or state.title ~= nil
    if state.session_id or state.run then
      M.new()
    end
    if had_turns then
      vim.notify('pi_bridge: agent ' .. name .. ': a new conversation', vim.log.levels.INFO)
    end
    state.agent = name
    vim.cmd.redrawstatus({ bang = true })
    M.load_commands()
    done_with(done, true)
  end)
end

--- :PiAgent without a name: vim.ui.select over the agents (a missing one shown with why, and not
--- taken).
--- @param done fun(ok: boolean)?
function M.pick_agent(done)
  M.agents(function(agents, default)
    local current = state.agent or default
    vim.ui.select(agents, {
      prompt = 'pi: agent of this conversation',
      kind = 'pi_bridge.agent',
      format_item = function(agent)
        local why = M.agent_unavailable(agent)
        local mark = agent.name == current and '● ' or '  '
        local version = agent.version and (' ' .. agent.version) or ''
        return mark .. agent.name .. version .. (why ~= '' and ('  (' .. why .. ')') or '')
      end,
    }, function(agent)
      if agent then
        M.set_agent(agent.name, done)
      else
        done_with(done, false)
      end
    end)
  end)
end

actions = {
  send = function()
    M.send()
  end,
  steer = function()
    M.steer()
  end,
  stop = M.stop,
  model = function()
    M.pick_model()
  end,
  new = M.new,
  diff = function()
    M.diff_at_cursor()
  end,
}

approve.mode_hooks = { get = M.mode, set = M.mode_set }
--- The conversation whose `/` commands the prompt's completion lists.
commands.session_id = function()
  return state.session_id
end

return M
