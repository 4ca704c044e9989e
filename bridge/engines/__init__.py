"""How one attempt is made: one agent process (json) or one prompt to a live agent (rpc)."""
