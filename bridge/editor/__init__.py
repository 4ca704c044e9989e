"""The editor's own hands: its buffers for reads and writes, its terminal for commands."""
