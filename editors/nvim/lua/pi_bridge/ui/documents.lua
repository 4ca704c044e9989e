--- Document sync: the bridge's client attached to every file buffer the user edits.
local client = require('pi_bridge.core.client')

local M = {}

--- Whether `buf` is a file the user edits (not a scratch, help, terminal or chat buffer).
--- @param buf integer
--- @return boolean
function M.is_file_buffer(buf)
  return vim.api.nvim_buf_is_loaded(buf)
    and vim.bo[buf].buftype == ''
    and vim.api.nvim_buf_get_name(buf) ~= ''
end

--- Attach the client to every file buffer, open now or later: vim.lsp then sends didOpen,
--- didChange and didClose, so the bridge reads what the user sees, and an agent's write to a
--- buffer with unsaved changes comes back as `workspace/applyEdit`, which vim.lsp's own handler
--- applies to the buffer (its client capabilities declare `workspace.applyEdit`).
--- @param id integer
function M.sync_documents(id)
  local function attach(buf)
    if id == client.id() and M.is_file_buffer(buf) and not vim.lsp.buf_is_attached(buf, id) then
      vim.lsp.buf_attach_client(buf, id)
    end
  end
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    attach(buf)
  end
  local group = vim.api.nvim_create_augroup('pi_bridge_document_sync', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile', 'BufFilePost' }, {
    group = group,
    callback = function(ev)
      attach(ev.buf)
    end,
  })
end

client.on_start(M.sync_documents)

return M
