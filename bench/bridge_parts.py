"""The bridge's internals a benchmark drives directly, because they are what it measures.

The one module of bench/ that may import them (tests/unit/test_layout_bench.py): when one moves,
this file is the one to change."""

from __future__ import annotations

from bridge.agents.acp.catalog import CATALOG, AcpAgentSpec, model_value
from bridge.agents.pi.session_paths import cwd_folder
from bridge.checkpoints.shadow_git import ShadowRepo, find_git
from bridge.policy.approvals import ALLOW_ONCE
from bridge.policy.gate import ModeBoard
from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.policy.sandbox import SANDBOX_DIR_ENV, SECCOMP_FILE, SandboxBoard, confinement
from bridge.process import bwrap, seccomp

__all__ = [
    "ALLOW_ONCE",
    "CATALOG",
    "SANDBOX_DIR_ENV",
    "SECCOMP_FILE",
    "STATE_DIR_ENV",
    "AcpAgentSpec",
    "ModeBoard",
    "SandboxBoard",
    "ShadowRepo",
    "bwrap",
    "confinement",
    "cwd_folder",
    "find_git",
    "model_value",
    "seccomp",
]
