"""The scripted model and the pi agent dirs the real-pi benchmarks run against (loopback only)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bridge.scripted_model import ScriptedModelServer, write_pi_agent_dir

PROVIDER = "fake"
# pi-acp asks the npm registry for a newer pi on every session/new (`npm view`). Benchmarks run
# on loopback only: its registry is pointed at a closed loopback port, so the lookup fails fast.
DEAD_REGISTRY = "http://127.0.0.1:9/"


@dataclass(frozen=True)
class ModelEnv:
    """A running scripted model and an agent dir whose settings default to model `text`."""

    base_url: str
    agent_dir: Path
    workdir: Path

    def pi_env(self) -> dict[str, str]:
        """Environment additions that point pi at the scripted model."""
        return {"PI_CODING_AGENT_DIR": str(self.agent_dir), "PI_OFFLINE": "1"}


@contextlib.contextmanager
def scripted_model() -> Iterator[ModelEnv]:
    """Start the scripted model; yield its agent dir (default provider/model set for pi-acp)."""
    with tempfile.TemporaryDirectory(prefix="pi-bench-") as tmp, ScriptedModelServer() as server:
        agent_dir = Path(tmp) / "agent"
        write_pi_agent_dir(agent_dir, server.base_url, provider=PROVIDER)
        settings_path = agent_dir / "settings.json"
        settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
        settings.update({"defaultProvider": PROVIDER, "defaultModel": "text"})
        settings_path.write_text(json.dumps(settings))
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        yield ModelEnv(server.base_url, agent_dir, workdir)
