"""Policy: approvals and modes, rules, project trust, the sandbox's settings, file access and secrets."""
