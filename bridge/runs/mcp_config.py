"""A conversation's MCP servers, written to a private file its agent reads."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from bridge.contract import McpServerHttp, McpServerStdio

MCP_DIR: Final = "mcp"
McpServers = Sequence[McpServerStdio | McpServerHttp]


def entry_of(server: McpServerStdio | McpServerHttp) -> dict[str, Any]:
    """One server in the common `mcpServers` entry form (env and headers as objects)."""
    if isinstance(server, McpServerHttp):
        return {"type": "http", "url": server.url, "headers": {h.name: h.value for h in server.headers}}
    return {
        "type": "stdio",
        "command": server.command,
        "args": list(server.args),
        "env": {variable.name: variable.value for variable in server.env},
    }


def config_of(servers: McpServers) -> dict[str, Any]:
    """The whole file's content."""
    return {"mcpServers": {server.name: entry_of(server) for server in servers}}


def secrets_of(servers: Iterable[McpServerStdio | McpServerHttp]) -> list[str]:
    """Every env value and header value: the bridge masks each of them wherever it reports."""
    values: list[str] = []
    for server in servers:
        pairs = server.headers if isinstance(server, McpServerHttp) else server.env
        values.extend(pair.value for pair in pairs if pair.value)
    return values


class McpConfigFiles:
    """The MCP config files of this bridge process, one per distinct set of servers."""

    def __init__(self, root: Path) -> None:
        #: The directory, unique to this bridge process; made (0700) with its first file.
        self.path = root / MCP_DIR / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._key = os.urandom(32)
        self._written: set[str] = set()

    def file_for(self, servers: McpServers) -> str | None:
        """The path of the file listing `servers` (written once, whole); None for no servers."""
        if not servers:
            return None
        content = json.dumps(config_of(servers), sort_keys=True, separators=(",", ":")).encode()
        name = hmac.new(self._key, content, hashlib.sha256).hexdigest()[:32] + ".json"
        target = self.path / name
        if name in self._written and target.exists():
            return str(target)
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path, 0o700)
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=".mcp-")  # mkstemp: 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(temp, target)
        self._written.add(name)
        return str(target)

    def remove(self) -> None:
        """Remove the directory (the bridge is done)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._written.clear()
