"""pi-bridge: drive the pi coding agent from editors over JSON-RPC (stdio)."""

__version__ = "0.1.0"
