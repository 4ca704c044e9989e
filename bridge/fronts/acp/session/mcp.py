"""A session's `mcpServers`: checked raw with the contract's strict model (the SDK's drops what it
cannot read), and merged with the defaults; values never appear in an error."""

from __future__ import annotations

from typing import Any, Final

from acp import RequestError
from pydantic import TypeAdapter, ValidationError

from bridge.contract import MAX_MCP_SERVERS, McpServer, McpServerHttp, McpServerStdio

#: The ACP methods whose params carry the session's MCP servers.
SESSION_METHODS: Final = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
Servers = list[McpServerStdio | McpServerHttp]
_SERVERS: Final[TypeAdapter[Servers]] = TypeAdapter(list[McpServer])


def servers_of(raw: Any, field: str = "mcpServers") -> Servers:
    """The servers of a raw `mcpServers` list; raises RequestError (-32602) for a bad one."""
    if raw is None:
        return []
    if isinstance(raw, list) and len(raw) > MAX_MCP_SERVERS:
        raise RequestError(-32602, f"invalid params: {field}: at most {MAX_MCP_SERVERS} MCP servers")
    try:
        servers = _SERVERS.validate_python(raw, strict=True)
    except ValidationError as exc:
        problems = [
            {"field": ".".join([field, *(str(part) for part in error["loc"])]), "message": error["msg"]}
            for error in exc.errors()
        ]
        text = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
        raise RequestError(-32602, f"invalid params: {text}", {"errors": problems}) from None
    seen: dict[str, str] = {}
    for server in servers:
        key = server.name.replace("-", "_")
        if key in seen:
            message = f"MCP server names {seen[key]!r} and {server.name!r} name the same server"
            raise RequestError(-32602, f"invalid params: {field}: {message}")
        seen[key] = server.name
    return servers


def check_params(method: str, params: Any) -> None:
    """Refuse a session method whose `mcpServers` holds an entry the bridge cannot use."""
    if method in SESSION_METHODS and isinstance(params, dict):
        servers_of(params.get("mcpServers"))


def merged(session: Servers, defaults: Servers) -> Servers:
    """The session's servers, then each default whose name the session does not use."""
    names = {server.name.replace("-", "_") for server in session}
    return [*session, *(d for d in defaults if d.name.replace("-", "_") not in names)]
