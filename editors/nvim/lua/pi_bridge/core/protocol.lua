--- The pi-bridge wire contract v1 as seen from Lua: method names and message types, mirrored once.
---
--- Source of truth: bridge/contract.py (and docs/protocol.schema.json generated from it). Nothing else
--- in this plugin spells a method name or a message type.
local M = {}

M.PROTOCOL_VERSION = 1
M.SERVER_NAME = 'pi-bridge'

M.RUN = 'pi/run'
M.CANCEL = 'pi/cancel'
M.RUNS = 'pi/runs'
M.MESSAGE = 'pi/message'
M.SESSIONS = 'pi/sessions'
M.SESSION = 'pi/session'
M.STEER = 'pi/steer'
M.CLOSE_SESSION = 'pi/closeSession'
M.PERMISSIONS = 'pi/permissions'
M.SET_PERMISSIONS = 'pi/setPermissions'
M.SET_MODE = 'pi/setMode'
M.COMMANDS = 'pi/commands'
M.MODELS = 'pi/models'
M.RENAME_SESSION = 'pi/renameSession'
M.DELETE_SESSION = 'pi/deleteSession'
M.CHECKPOINTS = 'pi/checkpoints'
M.REWIND = 'pi/rewind'
M.CHECKPOINT_FILE = 'pi/checkpointFile'
--- Server -> client: the bridge asks the user before a tool call runs.
M.REQUEST_PERMISSION = 'pi/requestPermission'
--- Server -> client: an agent's own dialog (select, confirm, input, editor) put to the user.
M.ASK = 'pi/ask'
M.MODES = { 'ask', 'auto-edit', 'plan', 'full' }
--- How a run's tool commands are confined (pi/run's `sandbox.mode`).
M.SANDBOX_MODES = { 'off', 'workspace-write', 'read-only' }

--- Every request method of the contract, in the order the bridge advertises them.
M.METHODS = {
  M.RUN,
  M.CANCEL,
  M.RUNS,
  M.SESSIONS,
  M.SESSION,
  M.STEER,
  M.CLOSE_SESSION,
  M.PERMISSIONS,
  M.SET_PERMISSIONS,
  M.SET_MODE,
  M.COMMANDS,
  M.RENAME_SESSION,
  M.DELETE_SESSION,
  M.CHECKPOINTS,
  M.REWIND,
  M.CHECKPOINT_FILE,
  M.MODELS,
}

--- What the chat needs beyond one-shot runs (checked by :checkhealth).
M.CONVERSATION_METHODS = { M.SESSIONS, M.SESSION, M.STEER }

M.REQUEST_CANCELLED = -32800
M.INVALID_PARAMS = -32602

M.THINKING_LEVELS = { 'off', 'minimal', 'low', 'medium', 'high', 'xhigh' }

--- Message types of `pi/message`.
M.types = {
  SESSION_STARTED = 'session.started',
  SESSION_RESUMED = 'session.resumed',
  ASSISTANT = 'assistant',
  THOUGHT = 'assistant.thought',
  TOOL_CALL = 'tool.call',
  TOOL_UPDATE = 'tool.update',
  TOOL_COMPLETED = 'tool.completed',
  TOOL_FAILED = 'tool.failed',
  TERMINAL_COMPLETED = 'terminal.completed',
  TERMINAL_FAILED = 'terminal.failed',
  TERMINAL_CANCELLED = 'terminal.cancelled',
  RUN_RETRYING = 'run.retrying',
  RUN_QUEUED = 'run.queued',
  RUN_STEERED = 'run.steered',
  NOTICE = 'notice',
  PERMISSION_REQUESTED = 'permission.requested',
  PERMISSION_RESOLVED = 'permission.resolved',
  SESSION_COMPACTING = 'session.compacting',
  SESSION_COMPACTED = 'session.compacted',
  SESSION_RENAMED = 'session.renamed',
  PLAN = 'plan',
}

--- Run status that each terminal message ends an attempt with.
M.terminal_status = {
  [M.types.TERMINAL_COMPLETED] = 'completed',
  [M.types.TERMINAL_FAILED] = 'failed',
  [M.types.TERMINAL_CANCELLED] = 'cancelled',
}

return M
