"""Agent-neutral orchestration: runs, their attempts and retry, history and redaction."""
