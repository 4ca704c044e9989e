--- Kept for configs written against the old path: the module is pi_bridge.ui.chat.
return require('pi_bridge.ui.chat')
