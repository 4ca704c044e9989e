"""An ACP session's bookkeeping: its conversation, its prompts, its modes and MCP servers."""
