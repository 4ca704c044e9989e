--- Kept for configs written against the old path: the module is pi_bridge.ui.commands.
return require('pi_bridge.ui.commands')
