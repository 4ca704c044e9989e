"""A conversation's MCP servers in ACP's `McpServer` form, read from the bridge's private file.

The file (bridge/runs/mcp_config.py) holds them whole, secrets included; the launch names only its path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from acp import schema


def session_servers(config: str | None, *, http: bool) -> list[schema.McpServerStdio | schema.HttpMcpServer]:
    """The servers of the file at `config` (none: no servers), stdio always and http when the
    agent's `mcpCapabilities.http` says so; ValueError naming a server the agent cannot take."""
    if not config:
        return []
    try:
        listed = orjson.loads(Path(config).read_bytes()).get("mcpServers") or {}
    except (OSError, orjson.JSONDecodeError, AttributeError) as exc:
        raise ValueError(
            f"could not be given its MCP servers: the bridge's file of them is unreadable ({exc})"
        ) from exc
    servers: list[schema.McpServerStdio | schema.HttpMcpServer] = []
    for name, entry in listed.items():
        servers.append(_server(str(name), entry if isinstance(entry, dict) else {}, http=http))
    return servers


def _server(name: str, entry: dict[str, Any], *, http: bool) -> schema.McpServerStdio | schema.HttpMcpServer:
    if entry.get("type") == "http":
        if not http:
            raise ValueError(
                f"takes no http MCP server (its mcpCapabilities.http is false): {name!r} was not given"
            )
        headers = [schema.HttpHeader(name=k, value=str(v)) for k, v in (entry.get("headers") or {}).items()]
        return schema.HttpMcpServer(type="http", name=name, url=str(entry.get("url") or ""), headers=headers)
    env = [schema.EnvVariable(name=k, value=str(v)) for k, v in (entry.get("env") or {}).items()]
    args = [str(a) for a in entry.get("args") or []]
    return schema.McpServerStdio(name=name, command=str(entry.get("command") or ""), args=args, env=env)
