"""Agent-neutral policies the runs layer applies to what an agent does (see file_access.py)."""
