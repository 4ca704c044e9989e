--- Kept for configs written against the old path: the module is pi_bridge.core.install.
return require('pi_bridge.core.install')
