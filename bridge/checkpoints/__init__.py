"""Checkpoints: a shadow git of the workspace, taken around each turn, and rewind."""
