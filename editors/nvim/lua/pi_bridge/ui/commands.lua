--- The `/` commands of the chat's prompt area: `pi/commands` of the current conversation (pi's
--- extension, prompt-template and skill commands plus the bridge's own `/compact`, `/name`, …),
--- fetched once per conversation, and the prompt buffer's 'omnifunc' that completes them.
---
--- A command is a prompt of its own: only a `/word` at the very start of the prompt completes.
local protocol = require('pi_bridge.core.protocol')

local M = {}

--- The chat conversation's session id; the chat registers its own (commands never requires it).
--- @return string?
M.session_id = function()
  return nil
end

--- @class pi_bridge.Command
--- @field name string without the leading slash ("compact", "skill:review")
--- @field description string?
--- @field source string "extension"|"prompt"|"skill"|"bridge"
--- @field argumentHint string?

--- The list of the conversation it was fetched for (`key`), nil until an answer came.
--- @type {key: string, commands: pi_bridge.Command[]}?
local cache
--- The key of the request in flight, so a late answer of an older conversation is dropped.
--- @type string?
local loading
--- A failed pi/commands was reported already.
local warned = false

--- `v` if it is a string (a JSON null may come as vim.NIL), else nil.
local function str(v)
  return type(v) == 'string' and v or nil
end

--- Which conversation a list belongs to: its session, else the directory of a new one (of
--- `agent`, when the conversation names one).
--- @param session_id string?
--- @param cwd string
--- @param agent string?
--- @return string
local function key_of(session_id, cwd, agent)
  local key = session_id and ('session:' .. session_id) or ('cwd:' .. cwd)
  return agent and ('agent:' .. agent .. ' ' .. key) or key
end

--- The params of pi/commands for a conversation (`agent`: the one it picked, not the default).
local function params_of(session_id, cwd, agent)
  local params = session_id and { sessionId = session_id } or { cwd = cwd }
  params.agent = agent
  return params
end

--- Fetch the list of the conversation (`session_id`, else a new one in `cwd`) unless it is the
--- one held already; `on_done(commands)` gets the list (an empty one when the bridge refused).
--- @param session_id string?
--- @param cwd string
--- @param on_done fun(commands: pi_bridge.Command[], session_id: string?)? the list, and the
---   session the bridge opened for a new conversation (asked without `session_id`)
--- @param agent string? the agent the conversation picked (nil: the bridge's default)
function M.refresh(session_id, cwd, on_done, agent)
  local key = key_of(session_id, cwd, agent)
  if cache and cache.key == key then
    if on_done then
      on_done(cache.commands)
    end
    return
  end
  loading = key
  require('pi_bridge.core.client').request(
    protocol.COMMANDS,
    params_of(session_id, cwd, agent),
    function(err, result)
      local commands = (not err and result and type(result.commands) == 'table') and result.commands
        or {}
      if loading == key then
        loading = nil
        if not err then -- a failed fetch is asked again next time
          cache = { key = key, commands = commands }
        end
      end
      if err and not warned then
        -- Said once: an older bridge without pi/commands leaves `/` with nothing to complete.
        warned = true
        vim.notify(
          'pi_bridge: no / commands: pi/commands: ' .. tostring(err.message),
          vim.log.levels.WARN
        )
      end
      if on_done then
        local opened = not session_id and result and str(result.sessionId) or nil
        on_done(commands, opened)
      end
    end
  )
end

--- The list held for a new conversation is the list of the session the bridge opened for it.
--- @param session_id string
--- @param agent string? the agent it was asked of (nil: the bridge's default)
function M.rekey(session_id, agent)
  if cache then
    cache.key = key_of(session_id, '', agent)
  end
end

--- Forget the list (the conversation changed: the next use fetches that one's).
function M.invalidate()
  cache, loading = nil, nil
end

--- The list held for the current conversation (nil before its answer).
--- @return pi_bridge.Command[]?
function M.cached()
  return cache and cache.commands or nil
end

--- The chat conversation's list, waiting up to `timeout_ms` for it when it is not held yet.
--- @param timeout_ms integer
--- @return pi_bridge.Command[]
local function current(timeout_ms)
  local session_id, cwd = M.session_id(), vim.fn.getcwd()
  local got
  M.refresh(session_id, cwd, function(commands)
    got = commands
  end)
  if got == nil then
    vim.wait(timeout_ms, function()
      return got ~= nil
    end, 10)
  end
  return got or {}
end

--- Completion items of the commands whose `/name` starts with `base` (a `/` included).
--- @param commands pi_bridge.Command[]
--- @param base string
--- @return table[] complete-items
function M.items(commands, base)
  local out = {}
  for _, c in ipairs(commands) do
    local word = '/' .. tostring(c.name)
    local hint, description = str(c.argumentHint), str(c.description) or ''
    if vim.startswith(word, base) then
      out[#out + 1] = {
        word = word,
        abbr = hint and (word .. ' ' .. hint) or word,
        menu = ('[%s] %s'):format(str(c.source) or '?', description),
        info = description,
        kind = 'c',
        icase = 0,
        dup = 0,
        user_data = { pi_bridge_command = c },
      }
    end
  end
  table.sort(out, function(a, b)
    return a.word < b.word
  end)
  return out
end

--- The column (0-based) where a command starts on the cursor's line, or nil: the prompt's first
--- line, a `/` at its start (after blanks), the cursor still in that word.
--- @return integer?
function M.command_start()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  if row ~= 1 then
    return nil
  end
  local before = vim.api.nvim_get_current_line():sub(1, col)
  local blanks, word = before:match('^(%s*)(/[^%s]*)$')
  return word and #blanks or nil
end

--- 'omnifunc' of the prompt area (i_CTRL-X_CTRL-O): the `/` commands of the conversation.
--- @param findstart integer
--- @param base string
--- @return integer|table[]
function M.omnifunc(findstart, base)
  if findstart == 1 then
    return M.command_start() or -3 -- -3: not a command here, leave completion quietly
  end
  return M.items(current(3000), base)
end

--- A completion source of nvim-cmp: `require('cmp').register_source('pi_bridge',
--- require('pi_bridge.ui.commands').cmp_source())` and `{ name = 'pi_bridge' }` in `sources`. It is
--- available only in the chat's prompt area (b:pi_bridge_prompt).
--- @return table
function M.cmp_source()
  local source = {}
  function source:is_available()
    return vim.b.pi_bridge_prompt == true
  end
  function source:get_trigger_characters()
    return { '/' }
  end
  function source:get_keyword_pattern()
    return [[/\S*]]
  end
  function source:complete(_, callback)
    if not M.command_start() then
      return callback({ items = {}, isIncomplete = false })
    end
    M.refresh(M.session_id(), vim.fn.getcwd(), function(commands)
      local items = {}
      for _, item in ipairs(M.items(commands, '/')) do
        local c = item.user_data.pi_bridge_command
        items[#items + 1] = {
          label = item.abbr,
          filterText = item.word,
          insertText = item.word,
          kind = 3, -- lsp.CompletionItemKind.Function
          detail = '[' .. (str(c.source) or '?') .. ']',
          documentation = item.info,
        }
      end
      callback({ items = items, isIncomplete = false })
    end)
  end
  return source
end

return M
