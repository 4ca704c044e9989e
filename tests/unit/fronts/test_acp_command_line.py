"""`pi-bridge acp`'s command line: what its options set in the configuration the front serves."""

from __future__ import annotations

from typing import Any

import pytest

from bridge import cli
from bridge.config import BridgeConfig
from bridge.fronts.acp import first_frame, serve


def _served_config(monkeypatch: pytest.MonkeyPatch, *argv: str) -> BridgeConfig:
    """The configuration `pi-bridge ARGV` would serve ACP with (stdin left unread)."""
    served: list[BridgeConfig] = []

    def run_acp(first: Any, adapter: Any, config: BridgeConfig) -> int:
        served.append(config)
        return 0

    monkeypatch.setattr(first_frame.FirstFrame, "start", classmethod(lambda cls: None))
    monkeypatch.setattr(serve, "run_acp", run_acp)
    assert cli.main(list(argv)) == 0
    assert len(served) == 1
    return served[0]


def test_no_warm_pool_starts_no_spare_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-warm-pool: no spare agent boots beside a session in use (one booting in the pause
    before a follow-up took a core from it); without it the spare stays on."""
    assert _served_config(monkeypatch, "acp").warm_pool is True
    assert _served_config(monkeypatch, "acp", "--no-warm-pool").warm_pool is False
    scripted = _served_config(monkeypatch, "--scripted-model", "acp", "--no-warm-pool", "--plan-tool")
    assert scripted.warm_pool is False
    assert scripted.plan_tool is True
