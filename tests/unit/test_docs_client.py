"""The minimal client printed in docs/clients.md works against the real bridge (the docs cannot rot)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.fakes.fake_pi import TEXT as FAKE_PI_TEXT
from tests.support.env import ROOT, bridge_env, fake_pi_command


def test_minimal_client_from_the_docs_runs_a_prompt(tmp_path) -> None:
    text = (ROOT / "docs" / "clients.md").read_text()
    code = re.search(r"## A minimal client.*?```python\n(.*?)```", text, re.S)
    assert code, "docs/clients.md lost its minimal client"
    script = tmp_path / "pi_client.py"
    script.write_text(code.group(1))
    env = bridge_env({"PI_BRIDGE_PI_COMMAND": " ".join(fake_pi_command())})
    done = subprocess.run(
        [sys.executable, str(script), "Say hello"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(FAKE_PI_TEXT)
    assert "'status': 'completed'" in done.stdout
