"""pi-specific knowledge stays behind bridge/agents/pi/ and the AgentAdapter seam."""

from __future__ import annotations

import re

from bridge.agents.pi import PiAgent
from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.values import RunOptions
from tests.support.env import ROOT

# pi's event names, its environment, and wire method literals (the contract has the constants).
PI_SPECIFIC = re.compile(r'agent_end|PI_CODING_AGENT|"pi/run"')
# The ACP catalog's pi-acp entry points pi (run by pi-acp) at a model through pi's agent dir.
ALLOWED = {"contract.py", "scripted_model/http_server.py", "agents/acp/catalog.py"}


def test_no_pi_event_env_or_method_literal_outside_the_seam() -> None:
    offenders = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        relative = path.relative_to(ROOT / "bridge")
        if relative.parts[:2] == ("agents", "pi") or str(relative) in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PI_SPECIFIC.search(line.split("#", 1)[0]):
                offenders.append(f"bridge/{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_an_oversized_end_of_run_line_still_ends_the_run() -> None:
    mapper = PiEventMapper(RunOptions(prompt="p", cwd="/"))
    out = mapper.feed_oversized(
        "a line of 70000000 bytes, over the bound", b'{"type":"agent_end","messages":['
    )
    assert [m.type for m in out] == ["terminal.completed"]
    assert mapper.invalid_lines == ["a line of 70000000 bytes, over the bound"]
    other = PiEventMapper(RunOptions(prompt="p", cwd="/"))
    assert other.feed_oversized("another", b'{"type":"message_end","message":{') == []
    assert other.last_terminal is None


def test_warm_launches_never_hold_the_prompt() -> None:
    """A warm entry lives for its TTL: it must not keep the last prompt's bytes (50 MB, twice)."""
    prompt = "p" * 1_000_000
    options = RunOptions(prompt=prompt, cwd="/tmp")
    launches = PiAgent().warm_launches(("pi",), options, "0190-session")
    assert [launch.session for launch in launches] == [None, "0190-session"]
    assert all(launch.spec.stdin == b"" for launch in launches)
    assert all(prompt not in " ".join(launch.spec.argv) for launch in launches)
    assert launches[1].delay > 0 and "--session" in launches[1].spec.argv


def test_continue_runs_are_never_primed() -> None:
    options = RunOptions(prompt="p", cwd="/tmp", continue_session=True)
    assert PiAgent().warm_launches(("pi",), options, "0190-session") == []
