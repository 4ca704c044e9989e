"""Hostile pi output: random event sequences and random bytes through LineFramer and PiEventMapper.

Properties, for any input: no exception escapes; after a finish_* the whole output holds exactly
one terminal message, last, with every tool call closed before it and the deltas concatenating to
its text; every message validates against the wire contract; LineFramer splits on b"\\n" only,
drops exactly the lines over its bound and keeps memory bounded (tracemalloc) even for a 100 MB
line or an endless line without a newline.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.contract import ErrorInfo, ShutdownReceipt, pi_message_adapter
from bridge.process.framing import LineFramer
from tests.support.streams import assert_stream_invariants

BUDGET = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RECEIPT = ShutdownReceipt(stage="killed", elapsed_ms=1.0, pids=[1], survivors=[])

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\u2028", "\u2029", "\u0085", "\x00", "a\nb", "\r\n", "😀", "e\u0301", '"', "\\"]
)
call_ids = st.sampled_from(["call_1", "call_2", "", "x"]) | st.integers(0, 3)
roles = st.sampled_from(["assistant", "user", "toolResult", "system", None, 5])
content = (
    st.lists(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["text", "thinking", "toolCall", "image"]),
                "text": texts,
                "thinking": texts,
            }
        ),
        max_size=3,
    )
    | texts
    | st.none()
)
usage = st.none() | st.fixed_dictionaries(
    {
        "input": st.integers(-5, 100) | st.booleans(),
        "output": st.integers(0, 100),
        "totalTokens": st.integers(0, 200),
        "cost": st.fixed_dictionaries({"total": st.floats(0, 1) | st.text(max_size=2)}),
    }
)
stop_reasons = st.sampled_from(["stop", "toolUse", "length", "error", "aborted", None, 3])

events = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("session"),
            "id": texts | st.none(),
            "version": st.integers(0, 4) | st.booleans() | texts,
            "cwd": texts,
        }
    ),
    st.sampled_from(
        [
            {"type": t}
            for t in ("agent_start", "turn_start", "agent_settled", "queue_update", "compaction_start")
        ]
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message_start"),
            "message": st.fixed_dictionaries({"role": roles, "content": content}),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message_update"),
            "assistantMessageEvent": st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["text_delta", "thinking_delta", "toolcall_delta", "text_start", "text_end"]
                    ),
                    "delta": texts | st.none() | st.integers(),
                }
            )
            | st.none(),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message_update"),
            "message": st.fixed_dictionaries({"role": roles, "content": content}),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message_end"),
            "message": st.fixed_dictionaries(
                {
                    "role": roles,
                    "content": content,
                    "usage": usage,
                    "stopReason": stop_reasons,
                    "errorMessage": texts | st.none(),
                }
            )
            | st.none(),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_execution_start"),
            "toolCallId": call_ids,
            "toolName": texts,
            "args": st.dictionaries(texts, texts, max_size=2) | texts,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_execution_update"),
            "toolCallId": call_ids,
            "toolName": texts,
            "partialResult": st.fixed_dictionaries({"content": content}) | st.none(),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_execution_end"),
            "toolCallId": call_ids,
            "toolName": texts,
            "isError": st.booleans() | st.none(),
            "result": st.fixed_dictionaries(
                {
                    "content": content,
                    "details": st.none()
                    | st.fixed_dictionaries(
                        {"truncation": st.booleans(), "fullOutputPath": texts | st.integers()}
                    ),
                }
            )
            | texts,
        }
    ),
    st.fixed_dictionaries({"type": st.just("turn_end"), "message": st.just({"role": "assistant"})}),
    st.fixed_dictionaries({"type": st.just("agent_end"), "messages": st.just([])}),
    st.fixed_dictionaries({"type": st.just("auto_retry_start"), "errorMessage": texts | st.none()}),
    st.fixed_dictionaries({"type": texts | st.integers() | st.none()}),
)


def encode_event(event: Any) -> bytes:
    # ensure_ascii=False: raw U+2028/U+2029/U+0085 inside strings, as pi writes them.
    return json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass")


raw_lines = st.one_of(
    events.map(encode_event),
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"\xff\xfe invalid utf-8",
            b'{"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "\xff"}}',
            b"\x00\x00\x00",
            b'{"truncated": ',
            b"[1, 2, 3]",
            b"null",
            b'"just a string"',
            b"   ",
            '{"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "a\u2028b\u2029c\u0085d"}}'.encode(),
        ]
    ),
)
finishes = st.sampled_from(["exited0", "exited1", "signal", "failed", "cancelled"])


def finish(mapper: PiEventMapper, how: str) -> list[Out]:
    if how == "exited0":
        return mapper.finish_exited(0, None, "")
    if how == "exited1":
        return mapper.finish_exited(1, None, "Error: boom\n\xff")
    if how == "signal":
        return mapper.finish_exited(None, "SIGKILL", "")
    if how == "failed":
        return mapper.finish_failed(ErrorInfo(kind="timeout", message="deadline", retryable=False))
    return mapper.finish_cancelled(RECEIPT)


def stamp(outs: list[Out]) -> list[dict[str, Any]]:
    """Stamp outputs like the run does, and validate each against the wire contract."""
    messages = []
    for seq, out in enumerate(outs, start=1):
        message = {"runId": "fuzz", "attempt": 1, "seq": seq, "type": out.type, "content": out.content}
        pi_message_adapter().validate_python(message)
        messages.append(message)
    return messages


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return pieces


@BUDGET
@given(
    lines=st.lists(raw_lines, max_size=40),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    how=finishes,
    live=st.booleans(),
)
def test_any_output_ends_with_exactly_one_terminal_and_consistent_text(
    lines: list[bytes], cuts: list[int], how: str, live: bool
) -> None:
    mapper = PiEventMapper(RunOptions(prompt="p", cwd="/", live_thoughts=live))
    framer = LineFramer(max_line=4096)
    outs: list[Out] = []
    for piece in chunked(b"\n".join(lines), cuts):
        for line in framer.feed(piece):
            if line:
                outs.extend(mapper.feed(line))
    last = framer.finish()
    if last:
        outs.extend(mapper.feed(last))
    outs.extend(finish(mapper, how))
    assert finish(mapper, "cancelled") == [], "a second finish must add nothing"
    assert mapper.feed(b'{"type": "agent_end"}') == [], "nothing after the terminal"
    messages = stamp(outs)
    terminals = [m for m in messages if m["type"].startswith("terminal.")]
    assert len(terminals) == 1 and messages[-1] is terminals[0]
    assert_stream_invariants(messages)
    assert terminals[0]["content"]["text"] == mapper.text


@BUDGET
@given(events_in=st.lists(events, max_size=30), how=finishes)
def test_out_of_order_events_never_raise(events_in: list[dict[str, Any]], how: str) -> None:
    mapper = PiEventMapper(RunOptions(prompt="p", cwd="/"))
    outs: list[Out] = []
    for event in events_in:
        outs.extend(mapper.feed(encode_event(event)))
    outs.extend(finish(mapper, how))
    messages = stamp(outs)
    assert_stream_invariants(messages)


def test_named_out_of_order_sequences() -> None:
    """message_end before message_start, tool end without start, update after end, double start."""
    sequences = [
        [
            {
                "type": "message_end",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "late"}],
                    "stopReason": "stop",
                },
            },
            {"type": "message_start", "message": {"role": "assistant"}},
            {"type": "agent_end"},
        ],
        [
            {
                "type": "tool_execution_end",
                "toolCallId": "t1",
                "toolName": "bash",
                "result": {"content": [{"type": "text", "text": "out"}]},
            },
            {"type": "agent_end"},
        ],
        [
            {"type": "tool_execution_start", "toolCallId": "t1", "toolName": "bash"},
            {"type": "tool_execution_end", "toolCallId": "t1", "result": {"content": []}},
            {"type": "tool_execution_update", "toolCallId": "t1", "partialResult": {"content": []}},
        ],
        [
            {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "no start "}},
            {"type": "message_start", "message": {"role": "assistant"}},
            {"type": "message_start", "message": {"role": "assistant"}},
            {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "again"}},
        ],
    ]
    # Found by hypothesis: a buffered thought, then a tool starts before its message ends, then the
    # run stops: finish_* emitted the thought between the tool.call and its tool.failed.
    sequences.append(
        [
            {"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta", "delta": "hmm"}},
            {"type": "tool_execution_start", "toolCallId": "t1", "toolName": "bash", "args": {}},
        ]
    )
    for sequence in sequences:
        for how in ("exited0", "cancelled"):
            mapper = PiEventMapper(RunOptions(prompt="p", cwd="/"))
            outs = [out for event in sequence for out in mapper.feed(encode_event(event))]
            outs.extend(finish(mapper, how))
            assert_stream_invariants(stamp(outs))


# --------------------------------------------------------------------------- LineFramer


@settings(BUDGET, max_examples=500)
@given(
    data=st.binary(max_size=600)
    | st.lists(
        st.sampled_from([b"a", b"\n", b"\r", b"\xe2\x80\xa8", b"\x00", b"xxxxxxxxxx"]), max_size=80
    ).map(b"".join),
    cuts=st.lists(st.integers(0, 1000), max_size=12),
    max_line=st.integers(1, 64),
)
def test_framer_splits_on_newline_only_and_drops_exactly_the_oversized(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    framer = LineFramer(max_line=max_line)
    got: list[bytes] = []
    for piece in chunked(data, cuts):
        got.extend(framer.feed(piece))
    last = framer.finish()
    *complete, tail = data.split(b"\n")
    assert got == [line for line in complete if len(line) <= max_line]
    assert last == (tail if tail and len(tail) <= max_line else None)
    dropped = sum(1 for line in complete if len(line) > max_line) + (1 if len(tail) > max_line else 0)
    assert len(framer.oversized) == dropped


def _peak_while(feed_all: Any) -> int:
    tracemalloc.start()
    try:
        feed_all()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_100_mb_line_in_chunks_is_dropped_with_bounded_memory() -> None:
    max_line = 16 * 1024 * 1024
    chunk = b"x" * (1024 * 1024)
    framer = LineFramer(max_line=max_line)
    lines: list[bytes] = []

    def feed_all() -> None:
        lines.extend(framer.feed(b'{"type":"message_update","pad":"'))
        for _ in range(100):
            lines.extend(framer.feed(chunk))
        lines.extend(framer.feed(b'"}\n{"type":"agent_end"}\n'))

    peak = _peak_while(feed_all)
    assert lines == [b'{"type":"agent_end"}'], "the line after the huge one survives"
    assert len(framer.oversized) == 1 and "over the" in framer.oversized[0]
    assert peak < 2 * max_line + 4 * len(chunk), f"peak {peak / 2**20:.1f} MiB for a 100 MB line"
    print(f"LineFramer 100 MB line: tracemalloc peak {peak / 2**20:.1f} MiB (max_line 16 MiB)")


def test_an_endless_line_without_newline_keeps_memory_bounded() -> None:
    framer = LineFramer(max_line=64 * 1024)
    chunk = bytes(range(256)).replace(b"\n", b"") * 256

    def feed_all() -> None:
        for _ in range(2000):
            assert framer.feed(chunk) == []

    peak = _peak_while(feed_all)
    assert framer.finish() is None
    assert len(framer.oversized) == 1
    assert peak < 4 * 64 * 1024 + 4 * len(chunk), f"peak {peak} bytes for an endless line"
    print(
        f"LineFramer endless line ({2000 * len(chunk) / 2**20:.0f} MiB, no newline): peak {peak / 2**10:.0f} KiB"
    )


def test_mapper_memory_is_bounded_by_what_it_must_keep() -> None:
    """A long garbage stream: invalid-line samples stay capped; memory does not grow with it."""
    mapper = PiEventMapper(RunOptions(prompt="p", cwd="/"))
    junk = b"\xff\x00 not json " * 400

    def feed_all() -> None:
        for _ in range(20_000):
            mapper.feed(junk)
            mapper.feed(b'{"type": "brand_new_event"}')

    peak = _peak_while(feed_all)
    assert mapper.invalid_count == 20_000 and len(mapper.invalid_lines) <= 20
    assert peak < 1024 * 1024, f"peak {peak} bytes"
    out = mapper.finish_exited(0, None, "")
    assert len(out) == 1 and out[0].type == "terminal.failed"
