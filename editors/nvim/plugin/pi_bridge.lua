-- pi-bridge user commands; the modules load on first use.
if vim.g.loaded_pi_bridge then
  return
end
vim.g.loaded_pi_bridge = 1

local command = vim.api.nvim_create_user_command

command('PiRun', function(o)
  if o.args ~= '' then
    require('pi_bridge').run(o.args)
    return
  end
  vim.ui.input({ prompt = 'pi: ' }, function(prompt)
    if prompt and prompt ~= '' then
      require('pi_bridge').run(prompt)
    end
  end)
end, { nargs = '*', desc = 'Ask pi (streams into a pi:// buffer)' })

command('PiRunSelection', function(o)
  require('pi_bridge').run_selection(o.line1, o.line2, o.args)
end, { nargs = '*', range = true, desc = 'Ask pi about the selected lines' })

command('PiCancel', function(o)
  require('pi_bridge').cancel(o.args ~= '' and o.args or nil)
end, {
  nargs = '?',
  desc = 'Cancel a pi run (default: the latest live one)',
  complete = function()
    return require('pi_bridge').live_run_ids()
  end,
})

command('PiLog', function()
  require('pi_bridge').open_log()
end, { nargs = 0, desc = "Open the pi-bridge log (the bridge's stderr)" })

command('PiBridgeInstall', function()
  local ok, result = pcall(require('pi_bridge.core.install').build)
  if ok then
    vim.notify('pi_bridge: bridge installed: ' .. result, vim.log.levels.INFO)
  else
    vim.notify(tostring(result), vim.log.levels.ERROR)
  end
end, { nargs = 0, desc = "Install the bridge into the plugin's venv (the lazy.nvim build step)" })

--- A UI module, once require('pi_bridge') has registered the UI on core.
local function ui(name)
  require('pi_bridge')
  return require('pi_bridge.ui.' .. name)
end

-- The chat: one conversation that follow-ups continue.
local function chat()
  return ui('chat')
end

command('PiChat', function()
  chat().open()
end, { nargs = 0, desc = 'Open the pi chat (thread + prompt area)' })

command(
  'PiSend',
  function(o)
    chat().send(o.args ~= '' and o.args or nil)
  end,
  { nargs = '*', desc = 'Send the prompt (or the arguments) to the chat; steers while a run goes' }
)

command('PiSteer', function(o)
  chat().steer(o.args)
end, { nargs = '+', desc = "Steer the chat's running run" })

command('PiStop', function()
  chat().stop()
end, { nargs = 0, desc = "Stop the chat's run (the partial answer stays)" })

command('PiNew', function()
  chat().new()
end, { nargs = 0, desc = 'Start a new conversation' })

command('PiSessions', function(o)
  chat().pick_session(nil, o.args ~= '' and o.args or nil)
end, {
  nargs = '?',
  desc = "Pick one of this directory's pi sessions: open (continue), rename or delete it",
  complete = function()
    return ui('chat').SESSION_ACTIONS
  end,
})

command('PiDiff', function()
  chat().diff_at_cursor()
end, { nargs = 0, desc = 'Diff of the edit on the cursor line of the chat' })

command('PiRewind', function()
  ui('rewind').pick()
end, {
  nargs = 0,
  desc = "Put the files, the chat's conversation or both back to before one of its prompts",
})

command('PiModel', function()
  chat().pick_model()
end, { nargs = 0, desc = 'Pick the model and thinking level of the next prompts' })

command('PiAgent', function(o)
  if o.args == '' then
    chat().pick_agent()
  else
    chat().set_agent(o.args)
  end
end, {
  nargs = '?',
  desc = "The agent of the chat's conversation (pi, claude, an ACP agent…); no name: pick one",
  complete = function(lead)
    local agents = require('pi_bridge.core.client').bridge.agents or {}
    local names = {}
    for _, agent in ipairs(agents) do
      if agent.found and vim.startswith(agent.name, lead) then
        names[#names + 1] = agent.name
      end
    end
    return names
  end,
})

command('PiMode', function(o)
  local session = ui('chat').state().session_id
  if o.args == '' then
    ui('approve').pick_mode(session)
  else
    ui('approve').set_mode(session, o.args)
  end
end, {
  nargs = '?',
  desc = "Set the chat conversation's permission mode (ask, auto-edit, plan, full)",
  complete = function()
    return require('pi_bridge.core.protocol').MODES
  end,
})

command('PiPermissions', function()
  ui('approve').manage_rules(vim.fn.getcwd())
end, { nargs = 0, desc = "List this workspace's permission rules and remove one" })

command('PiSandbox', function(o)
  ui('sandbox').command(o.fargs)
end, {
  nargs = '*',
  desc = "Sandbox of the agent's commands in the next runs: [off|workspace-write|read-only] "
    .. '[network|nonetwork]',
  complete = function(lead, line)
    return ui('sandbox').complete(lead, line)
  end,
})
