"""pi's flags come from one builder, for a one-shot run and for a live pi alike."""

from __future__ import annotations

from bridge.agents.pi.command import GATE_EXTENSION, launch_spec, pi_flags
from bridge.agents.pi.live import rpc_launch_spec
from bridge.agents.values import RunOptions


def test_a_live_pi_gets_the_same_flags_in_rpc_mode() -> None:
    options = RunOptions(prompt="x", cwd="/", provider="p", model="m", thinking="low", tools=("read",))
    assert pi_flags(options, live=True) == [
        "--mode", "rpc", "--provider", "p", "--model", "m", "--thinking", "low", "--tools", "read",
    ]  # fmt: skip
    assert pi_flags(options)[2:] == pi_flags(options, live=True)[2:]


def test_a_live_pi_resumes_or_starts_its_session_and_never_continues() -> None:
    resumed = RunOptions(prompt="x", cwd="/", session_id="s1")
    assert pi_flags(resumed, live=True, new_session_id="n1")[-2:] == ["--session", "s1"]
    fresh = RunOptions(prompt="x", cwd="/", continue_session=True)
    assert pi_flags(fresh, live=True, new_session_id="n1") == ["--mode", "rpc", "--session-id", "n1"]
    assert pi_flags(fresh, live=True) == ["--mode", "rpc"]
    assert pi_flags(fresh)[-1] == "--continue"


def test_every_pi_the_bridge_starts_loads_the_gate_extension() -> None:
    options = RunOptions(prompt="x", cwd="/")
    assert GATE_EXTENSION.is_file()
    for spec in (launch_spec(("pi",), options), rpc_launch_spec(("pi",), options)):
        assert spec.argv[-2:] == ("-e", str(GATE_EXTENSION)), spec.argv
