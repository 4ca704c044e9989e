-- For the test scripts that drive Neovim as a user who approves every tool call the bridge asks
-- about (the plugin answers pi/requestPermission through vim.ui.select): picks "Allow".
-- Usage: dofile(root .. '/editors/nvim/tests/support/approve_all.lua')
local select_before = vim.ui.select
vim.ui.select = function(items, opts, on_choice)
  if opts and opts.kind == 'pi_bridge_permission' then
    return on_choice(items[1]) -- "Allow"
  end
  return select_before(items, opts, on_choice)
end
