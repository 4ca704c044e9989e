--- The UI registered on core: the run view, the answers to the bridge's questions, document sync.
---
--- Loading this module is the wiring; core never requires the UI. The UI's entry points (the
--- chat, require('pi_bridge')) load it before they start the client.
local client = require('pi_bridge.core.client')
local handlers = require('pi_bridge.core.handlers')
local protocol = require('pi_bridge.core.protocol')
local approve = require('pi_bridge.ui.approve')
local ask = require('pi_bridge.ui.ask')
require('pi_bridge.ui.documents')

handlers.set_view(require('pi_bridge.ui.render'))
client.handle(protocol.REQUEST_PERMISSION, approve.on_request)
client.handle(protocol.ASK, ask.on_ask)

return {}
