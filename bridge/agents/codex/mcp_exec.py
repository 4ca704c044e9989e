"""Start one of a conversation's stdio MCP servers for Codex: read its entry from the bridge's
private file and exec it with its environment, so its secrets are in neither Codex's argv nor env.

Run as a script (`python -I -S mcp_exec.py FILE NAME`): the standard library only.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    """Exec server NAME of FILE (the common `{"mcpServers": {name: entry}}` form); 2 when it cannot."""
    if len(argv) != 3:
        print("usage: mcp_exec.py FILE NAME", file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as handle:
            entry = json.load(handle)["mcpServers"][argv[2]]
        command, args, env = str(entry["command"]), [str(a) for a in entry["args"]], entry["env"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"pi-bridge: MCP server {argv[2]!r} is not in the bridge's file: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command, [command, *args], {**os.environ, **{str(k): str(v) for k, v in env.items()}})
    except OSError as exc:  # Codex reports the server failed; this says why
        print(
            f"pi-bridge: MCP server {argv[2]!r} could not start ({command}): {exc.strerror}", file=sys.stderr
        )
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
