--- The sandbox of the agent's commands: setup's `sandbox`, changed for this Neovim by :PiSandbox.
---
--- The bridge confines a run's tool commands when its pi/run asks (`sandbox = {mode, network}`);
--- setup's `off` sends nothing, so the bridge's own default (`initializationOptions.sandbox`)
--- holds; `:PiSandbox off` is the user's word for the next runs and is sent as it is. The
--- bridge's `initialize` says whether a sandbox can be had here; a run asking for one that cannot
--- fails at once with the fix, and the statusline says so before the user sends one.
local protocol = require('pi_bridge.core.protocol')

local M = {}

--- @class pi_bridge.Sandbox
--- @field mode 'off'|'workspace-write'|'read-only'
--- @field network boolean

--- Set by :PiSandbox: holds for the next runs of this Neovim, over setup's `sandbox`.
--- @type pi_bridge.Sandbox?
local override

--- The sandbox of the next runs.
--- @return pi_bridge.Sandbox
function M.current()
  return vim.deepcopy(override or require('pi_bridge.core.config').get().sandbox)
end

--- The `sandbox` param of a pi/run; nil when setup's mode is off and :PiSandbox changed nothing.
--- @return table?
function M.run_param()
  local sandbox = M.current()
  if sandbox.mode == 'off' and not override then
    return nil
  end
  return { mode = sandbox.mode, network = sandbox.network }
end

--- Change the sandbox of the next runs (not setup's config); nil forgets the change.
--- @param sandbox pi_bridge.Sandbox?
function M.set(sandbox)
  override = sandbox and vim.deepcopy(sandbox) or nil
end

--- What the running bridge says of its sandbox (`{available, kind, reason, fix}`), nil before it
--- answered initialize.
--- @return table?
function M.capability()
  local client = require('pi_bridge.core.client').get()
  local caps = client and client.server_capabilities
  local pib = caps and caps.experimental and caps.experimental.piBridge
  return type(pib) == 'table' and type(pib.sandbox) == 'table' and pib.sandbox or nil
end

--- The statusline part: `sandbox workspace-write`, `+net` when network is on, `sandbox
--- unavailable` when the bridge cannot give the one asked for; nil when the mode is off.
--- @return string?
function M.status()
  local sandbox = M.current()
  if sandbox.mode == 'off' then
    return nil
  end
  local capability = M.capability()
  if capability and capability.available == false then
    return 'sandbox unavailable'
  end
  return 'sandbox ' .. sandbox.mode .. (sandbox.network and '+net' or '')
end

return M
