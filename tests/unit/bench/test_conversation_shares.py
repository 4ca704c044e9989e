"""The conversation bench's own shares: the bridge's part of a prompt and of a cancel, off its trace."""

from __future__ import annotations

from bench.suites.studies.conversation import own_cancel_share, own_share
from bench.trace_marks import Marks


def test_a_prompts_own_share_is_its_time_but_pis_from_the_prompt_written_to_the_event_read() -> None:
    marks: Marks = [
        ("client.in", 1.0002),
        ("engine.prompt", 1.0010),  # 1.0 ms after the client sent it
        ("pi.stdin", 1.0030),  # the write: pi runs in it, so it is pi's
        ("pi.out", 1.0060),  # pi's answer to the prompt command
        ("client.out", 1.0061),  # the session message
        ("pi.out", 1.0140),  # the line of its first text delta
        ("client.out", 1.0141),
        ("pi.out", 1.0200),  # later deltas, after the client had its first message
    ]
    share = own_share(marks, 1.0, 1.0145)
    assert share is not None and round(share * 1000, 6) == 1.5  # 1.0 before the write, 0.5 after the line
    assert own_share(marks, 2.0, 2.01) is None, "no marks of that prompt: no share, not a wrong one"


def test_a_cancels_own_share_leaves_out_pis_time_from_its_abort_to_its_answer() -> None:
    marks: Marks = [("cancel.token", 3.0005), ("cancel.agent_answered", 3.0065), ("cancel.swept", 3.0070)]
    share = own_cancel_share(marks, 3.0, 3.0080)
    assert share is not None and round(share * 1000, 6) == 2.0  # 8.0 in all, 6.0 of them pi's
    assert own_cancel_share([("cancel.token", 3.0005)], 3.0, 3.0080) is None
