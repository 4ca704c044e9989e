"""The live engine: one long-lived agent per conversation, each attempt one prompt to it."""
