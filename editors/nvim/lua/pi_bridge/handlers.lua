--- Kept for configs written against the old path: the module is pi_bridge.core.handlers.
return require('pi_bridge.core.handlers')
