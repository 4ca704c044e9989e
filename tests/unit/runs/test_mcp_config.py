"""MCP servers in the core: the contract's strict shapes, the private file, the live key, the masking."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.agents.claude.command import claude_env, claude_flags
from bridge.agents.pi.command import pi_env
from bridge.agents.values import MCP_CONFIG_ENV, RunOptions
from bridge.config import BridgeConfig, resolve_config
from bridge.contract import McpServerHttp, McpServerStdio, RunParams
from bridge.engines.live.live_agent import live_key
from bridge.policy.redact import MASK, Redactor, secrets_env
from bridge.runs.mcp_config import McpConfigFiles, config_of, secrets_of

STDIO = {
    "name": "tools",
    "command": "/usr/bin/tools-mcp",
    "args": ["--x"],
    "env": [{"name": "TOKEN", "value": "s3cret-token"}],
}
HTTP = {
    "type": "http",
    "name": "docs",
    "url": "http://127.0.0.1:9/mcp",
    "headers": [{"name": "Authorization", "value": "Bearer hdr-secret"}],
}


def servers(*entries: dict[str, object]) -> list[McpServerStdio | McpServerHttp]:
    params = RunParams.model_validate({"prompt": "x", "mcpServers": list(entries)})
    assert params.mcp_servers is not None
    return params.mcp_servers


def test_acp_shaped_entries_are_read_stdio_without_a_type_and_http_with_one() -> None:
    stdio, http = servers(STDIO, HTTP)
    assert isinstance(stdio, McpServerStdio) and stdio.env[0].value == "s3cret-token"
    assert isinstance(http, McpServerHttp) and http.headers[0].name == "Authorization"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({**STDIO, "name": "a b"}, "name"),
        ({**STDIO, "env": {"A": "b"}}, "env"),
        ({**STDIO, "args": "--x"}, "args"),
        ({**STDIO, "command": ""}, "command"),
        ({**STDIO, "extra": 1}, "extra"),
        ({**HTTP, "url": "file:///etc/passwd"}, "url"),
        ({**HTTP, "headers": [{"name": "X", "value": "a\r\nInjected: 1"}]}, "headers"),
        ({"type": "sse", "name": "s", "url": "http://127.0.0.1:9/sse", "headers": []}, "mcpServers.0"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_field_and_never_its_value(
    entry: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        servers(entry)
    located = [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in refused.value.errors()]
    assert any(field in line for line in located), located
    assert all("s3cret" not in line and "Injected" not in line for line in located)


def test_two_names_for_one_server_are_refused() -> None:
    with pytest.raises(ValidationError, match="name the same server"):
        servers({**STDIO, "name": "my-tools"}, {**STDIO, "name": "my_tools"})


def test_the_file_is_private_named_by_its_content_and_in_the_common_form(tmp_path: Path) -> None:
    files = McpConfigFiles(tmp_path)
    chosen = servers(STDIO, HTTP)
    path = Path(files.file_for(chosen) or "")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == config_of(chosen)
    assert json.loads(path.read_text())["mcpServers"]["tools"]["env"] == {"TOKEN": "s3cret-token"}
    assert "s3cret" not in path.name
    assert files.file_for(servers(STDIO, HTTP)) == str(path), "the same set: the same file"
    assert files.file_for(servers(STDIO)) != str(path) and files.file_for([]) is None
    files.remove()
    assert not path.parent.exists()


def test_another_set_is_another_live_key_and_only_the_path_reaches_the_agents(tmp_path: Path) -> None:
    files = McpConfigFiles(tmp_path)
    base = RunOptions(prompt="x", cwd=str(tmp_path))
    one = replace(base, mcp_servers=tuple(servers(STDIO)), mcp_config=files.file_for(servers(STDIO)))
    two = replace(base, mcp_servers=tuple(servers(HTTP)), mcp_config=files.file_for(servers(HTTP)))
    assert live_key(("pi",), one, {}) != live_key(("pi",), two, {}) != live_key(("pi",), base, {})
    assert pi_env(one)[MCP_CONFIG_ENV] == one.mcp_config and MCP_CONFIG_ENV not in pi_env(base)
    flags = claude_flags(one, "default")
    assert flags[flags.index("--mcp-config") + 1] == one.mcp_config
    assert "s3cret" not in " ".join(flags) + json.dumps(claude_env(one)) + json.dumps(pi_env(one))


def test_every_env_and_header_value_is_masked_whatever_its_name() -> None:
    redactor = Redactor({}, secrets_env(secrets_of(servers(STDIO, HTTP))))
    assert redactor.text("spawn failed: s3cret-token / Bearer hdr-secret") == f"spawn failed: {MASK} / {MASK}"


def test_initialization_options_mcp_servers_are_the_default_and_a_bad_one_warns() -> None:
    config, warnings = resolve_config(BridgeConfig(), {"mcpServers": [STDIO]})
    assert [s.name for s in config.mcp_servers] == ["tools"] and warnings == []
    config, warnings = resolve_config(BridgeConfig(), {"mcpServers": [{"name": "x"}]})
    assert config.mcp_servers == () and any("mcpServers" in w for w in warnings)
