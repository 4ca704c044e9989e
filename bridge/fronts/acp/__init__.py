"""The ACP front: pi-bridge acp, on the official ACP SDK."""
