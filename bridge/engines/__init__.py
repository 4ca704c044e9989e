"""How one attempt is made: one agent process (one_process) or one prompt to a live agent (live/)."""
