"""The OS layer: spawning, framing, containment and the stop; it knows no agent and no protocol."""
