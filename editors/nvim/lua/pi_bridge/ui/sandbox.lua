--- :PiSandbox: change the sandbox of the next runs (core/sandbox.lua holds it), and its completion.
local protocol = require('pi_bridge.core.protocol')
local sandbox = require('pi_bridge.core.sandbox')

local M = {}

local NETWORK_WORDS = { network = true, nonetwork = false }

--- Completion of :PiSandbox: the modes, then network or nonetwork.
--- @param lead string the word being typed
--- @param line string the command line so far
--- @return string[]
function M.complete(lead, line)
  local words = vim.split(vim.trim(line), '%s+')
  local typing_first = #words == 1 or (#words == 2 and not line:match('%s$'))
  local candidates = typing_first and protocol.SANDBOX_MODES or { 'network', 'nonetwork' }
  return vim.tbl_filter(function(word)
    return vim.startswith(word, lead)
  end, candidates)
end

local function apply(mode, network)
  sandbox.set({ mode = mode, network = network })
  vim.cmd.redrawstatus({ bang = true }) -- the statusline shows the sandbox
  local status = sandbox.status() or 'no sandbox'
  vim.notify('pi_bridge: next runs: ' .. status, vim.log.levels.INFO)
end

--- `:PiSandbox [mode] [network|nonetwork]`: without arguments, pick the mode then the network
--- with vim.ui.select. A mode alone keeps the current network choice.
--- @param args string[]
function M.command(args)
  local mode, word = args[1], args[2]
  if mode then
    if not vim.tbl_contains(protocol.SANDBOX_MODES, mode) or #args > 2 then
      vim.notify(
        ('pi_bridge: :PiSandbox [%s] [network|nonetwork]'):format(
          table.concat(protocol.SANDBOX_MODES, '|')
        ),
        vim.log.levels.ERROR
      )
      return
    end
    if word ~= nil and NETWORK_WORDS[word] == nil then
      vim.notify('pi_bridge: :PiSandbox: network or nonetwork, not ' .. word, vim.log.levels.ERROR)
      return
    end
    local network = sandbox.current().network
    if word ~= nil then
      network = NETWORK_WORDS[word]
    end
    apply(mode, network)
    return
  end
  vim.ui.select(protocol.SANDBOX_MODES, {
    prompt = "Sandbox of the agent's commands",
    kind = 'pi_bridge.sandbox',
  }, function(picked)
    if not picked then
      return
    end
    if picked == 'off' then
      apply(picked, false)
      return
    end
    vim.ui.select({ 'nonetwork', 'network' }, {
      prompt = 'Network in the sandbox',
      kind = 'pi_bridge.sandbox_network',
      format_item = function(item)
        return item == 'network' and 'network on' or 'network off'
      end,
    }, function(net)
      if net then
        apply(picked, NETWORK_WORDS[net])
      end
    end)
  end)
end

return M
