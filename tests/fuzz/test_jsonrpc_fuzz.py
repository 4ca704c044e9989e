"""Hostile JSON-RPC input against a LIVE bridge process: it answers the right error and keeps serving.

One bridge (fake pi, tests/fakes/fake_pi.py) serves the whole module with a run in flight (the
fake pi's `slow` scenario, numbered words) the whole time; after every bad input a good pi/run
must succeed, and at the end the in-flight run must hold every word in order, gap-free seq and
exactly one terminal. Framing faults that can desynchronize the stream get a fresh bridge each.
Every hypothesis test has a fixed, derandomized example budget so CI time stays bounded.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bridge.fronts.lsp.writer import frame
from tests.fakes.fake_pi import TEXT as FAKE_PI_TEXT
from tests.support.env import fake_pi_command
from tests.support.leaks import no_run_processes
from tests.support.raw import RawBridge
from tests.support.streams import assert_stream_invariants

# Checkpoints off: these frames test the protocol, and a snapshot of the workspace per prompt is
# bench section 11's and tests/e2e/test_checkpoints.py's.
OPTIONS = {
    "piCommand": fake_pi_command(),
    "maxConcurrentRuns": 64,
    "silenceTimeoutMs": 20000,
    "checkpoints": False,
}
INFLIGHT = "inflight-run"
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


def good_run(bridge: RawBridge, **params: Any) -> dict[str, Any]:
    """A good pi/run of the fake pi's `text` scenario; it must complete with its stream intact."""
    answer = bridge.call("pi/run", {"prompt": "hi", "model": "text", **params})
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    assert result["status"] == "completed", result
    assert result["text"] == FAKE_PI_TEXT
    assert_stream_invariants(bridge.run_messages(result["runId"]))
    return result


def start_inflight(bridge: RawBridge) -> Any:
    """Start the long run that every fault must leave alone; return its request id."""
    msg_id = bridge.request("pi/run", {"prompt": "keep going", "model": "slow", "runId": INFLIGHT})
    bridge.wait_message(INFLIGHT, "assistant")
    return msg_id


def check_inflight_intact(bridge: RawBridge, msg_id: Any) -> None:
    """Cancel the in-flight run; every word it streamed arrived once, in order, seq gap-free."""
    answer = bridge.call("pi/cancel", {"runId": INFLIGHT})
    assert answer["result"]["found"] is True, answer
    error = bridge.response(msg_id)["error"]
    assert error["code"] == -32800 and error["data"]["status"] == "cancelled"
    messages = bridge.run_messages(INFLIGHT)
    assert_stream_invariants(messages)
    text = "".join(m["content"]["text"] for m in messages if m["type"] == "assistant")
    words = text.split()
    assert words == [f"word{i}" for i in range(len(words))], "the in-flight run lost or reordered output"
    assert error["data"]["text"] == text


class Live:
    """The module's bridge and the request id of its in-flight run."""

    def __init__(self) -> None:
        self.bridge = RawBridge()
        self.bridge.initialize(OPTIONS)
        self.inflight = start_inflight(self.bridge)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    """One bridge for the module, with a run in flight throughout."""
    state = Live()
    try:
        yield state
        assert state.bridge.alive(), "the bridge died"
        check_inflight_intact(state.bridge, state.inflight)
        assert state.bridge.shutdown() == 0
    finally:
        state.bridge.close()


@pytest.fixture
def fresh() -> Iterator[RawBridge]:
    """A bridge of its own (for faults that may desynchronize the stream), with a run in flight."""
    bridge = RawBridge()
    try:
        bridge.initialize(OPTIONS)
        yield bridge
    finally:
        bridge.close()


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert "error" in answer, f"expected an error, got {answer}"
    error: dict[str, Any] = answer["error"]
    return error


# --------------------------------------------------------------------------- well-framed bad bodies

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def _is_json(body: bytes) -> bool:
    import json

    try:
        json.loads(body)
    except ValueError:
        return False
    return True


bad_bodies = st.one_of(
    st.binary(max_size=200).filter(lambda b: not _is_json(b)).map(lambda b: ("parse", b)),
    st.binary(min_size=1, max_size=50).map(
        lambda b: ("parse", b'{"jsonrpc": "2.0", "x": "' + b"\xff\xfe" + b + b'"}')
    ),
    st.just(("parse", b"\x00" * 16)),
    st.just(("parse", b"")),
    json_values.filter(lambda v: not isinstance(v, dict)).map(
        lambda v: ("invalid", __import__("json").dumps(v).encode())
    ),
    st.dictionaries(st.sampled_from(["id", "method", "params", "result"]), json_values, max_size=3).map(
        lambda d: ("invalid", __import__("json").dumps(d).encode())
    ),
)


@FUZZ
@given(case=bad_bodies)
def test_bad_bodies_answer_parse_or_invalid_request_and_serving_goes_on(
    live: Live, case: tuple[str, bytes]
) -> None:
    kind, body = case
    bridge = live.bridge
    before = len(bridge.errors_with_null_id())
    bridge.send_bytes(frame(body))
    good_run(bridge)
    nulls = bridge.errors_with_null_id()[before:]
    assert len(nulls) == 1, f"one error with id null expected for {body[:80]!r}, got {nulls}"
    expected = -32700 if kind == "parse" else -32600
    assert nulls[0]["error"]["code"] == expected, (body[:80], nulls)


def test_object_with_id_but_bad_envelope_is_invalid_request_with_that_id(live: Live) -> None:
    bridge = live.bridge
    for payload in ({"id": "e1", "method": "pi/runs"}, {"jsonrpc": "1.0", "id": "e2", "method": "pi/runs"}):
        bridge.send(payload)
    bridge.send({"jsonrpc": "2.0", "id": "e3", "method": 5})
    assert error_of(bridge.response("e3"))["code"] == -32600
    good_run(bridge)


# --------------------------------------------------------------------------- framing faults

FRAMING_FAULTS: dict[str, bytes] = {
    "missing Content-Length": b"Content-Type: application/json\r\n\r\n"
    + b'{"jsonrpc":"2.0","id":"lost","method":"pi/runs"}',
    "non-numeric Content-Length": b"Content-Length: abc\r\n\r\n"
    + b'{"jsonrpc":"2.0","id":"lost","method":"pi/runs"}',
    "negative Content-Length": b"Content-Length: -5\r\n\r\n"
    + b'{"jsonrpc":"2.0","id":"lost","method":"pi/runs"}',
    "Content-Length shorter than the body": b"Content-Length: 10\r\n\r\n"
    + b'{"jsonrpc":"2.0","id":"lost","method":"pi/runs"}',
    "Content-Length longer than the body (truncated body)": b"Content-Length: 60\r\n\r\n"
    + b'{"jsonrpc":"2.0","id":"lost"',
    "Content-Length above the 512 MB limit": b"Content-Length: 999999999999\r\n\r\n" + b'{"jsonrpc":"2.0"}',
    "header line over 8 KB": b"X-Junk: " + b"a" * 20000 + b"\r\n\r\n",
    "body with no header at all": b'{"jsonrpc":"2.0","id":"lost","method":"pi/runs"}',
    "garbage line": b"\x00\xff\xfe not a header\n\r\n",
}


def probe_until_served(bridge: RawBridge, tries: int = 3, wait: float = 2.0) -> int:
    """Send pi/runs probes until one is answered; return how many frames were lost before it."""
    for lost in range(tries):
        msg_id = bridge.request("pi/runs", {})
        try:
            bridge.response(msg_id, wait)
            return lost
        except AssertionError:
            continue
    raise AssertionError(
        f"the bridge answered none of {tries} good frames after the fault: it never resynchronized"
    )


@pytest.mark.parametrize("fault", list(FRAMING_FAULTS))
def test_framing_fault_gets_parse_error_then_the_bridge_resynchronizes(fresh: RawBridge, fault: str) -> None:
    """A broken frame costs at most itself and the next frame; the bridge then serves again."""
    inflight = start_inflight(fresh)
    fresh.send_bytes(FRAMING_FAULTS[fault])
    lost = probe_until_served(fresh)
    assert lost <= 1
    errors = [e["error"]["code"] for e in fresh.errors_with_null_id()]
    assert set(errors) <= {-32700}, errors
    # A body with no header at all is glued to the next header line: no frame to answer.
    assert errors or fault == "body with no header at all", "no parse error was sent"
    good_run(fresh)
    check_inflight_intact(fresh, inflight)
    assert fresh.shutdown() == 0


@settings(FUZZ, max_examples=6, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(junk=st.binary(min_size=1, max_size=300))
def test_random_bytes_never_kill_the_bridge(junk: bytes) -> None:
    bridge = RawBridge()
    try:
        bridge.initialize(OPTIONS)
        bridge.send_bytes(junk + b"\r\n\r\n")
        probe_until_served(bridge)
        good_run(bridge)
        assert bridge.shutdown() == 0
    finally:
        bridge.close()


def test_truncated_frame_then_end_of_input_stops_cleanly(fresh: RawBridge) -> None:
    """A client that dies mid-frame: the bridge stops its runs (tree and all) and exits."""
    start_inflight(fresh)
    fresh.send_bytes(b'Content-Length: 500\r\n\r\n{"jsonrpc": "2.0", "id": 9, "meth')
    fresh.close_stdin()
    assert fresh.wait_exit() == 0
    messages = fresh.run_messages(INFLIGHT)
    assert_stream_invariants(messages)
    assert messages[-1]["type"] == "terminal.cancelled"
    assert messages[-1]["content"]["shutdown"]["survivors"] == []


# --------------------------------------------------------------------------- params

# Each pi/run field, with a strategy of JSON values of a WRONG type for it (null is valid for the
# optional ones: it means "absent"). Values pydantic's lax mode would coerce are tested apart.
_not_str = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_not_bool = st.one_of(
    st.integers(min_value=2),
    st.floats(allow_nan=False).filter(lambda f: f not in (0.0, 1.0)),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.text(max_size=5).filter(
        lambda s: s.lower() not in {"0", "1", "t", "f", "y", "n", "on", "no", "off", "yes", "true", "false"}
    ),
)
_not_int = st.one_of(
    st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
    st.text(max_size=5).filter(lambda s: not s.strip().lstrip("+-").isdigit()),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_not_list = st.one_of(
    st.booleans(),
    st.integers(),
    st.text(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_not_obj = st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2))

RUN_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "prompt": st.one_of(st.none(), _not_str, st.just("")),
    "runId": st.one_of(
        _not_str, st.just(""), st.just("has space"), st.just("x" * 129), st.just("semi;colon")
    ),
    "cwd": st.one_of(_not_str, st.just("relative/path"), st.just("/no/such/dir/anywhere")),
    "provider": st.one_of(_not_str, st.just("")),
    "model": st.one_of(_not_str, st.just("")),
    "thinking": st.one_of(
        _not_str,
        st.text(max_size=8).filter(lambda s: s not in {"off", "minimal", "low", "medium", "high", "xhigh"}),
    ),
    "tools": st.one_of(
        _not_list, st.lists(st.one_of(st.integers(), st.none(), st.booleans()), min_size=1, max_size=3)
    ),
    "sessionId": st.one_of(_not_str, st.just(""), st.just("s" * 257)),
    "continueSession": st.one_of(st.none(), _not_bool),
    "retry": st.one_of(
        _not_obj, st.just({"maxAttempts": 0}), st.just({"maxAttempts": 11}), st.just({"bogus": 1})
    ),
    "liveThoughts": st.one_of(st.none(), _not_bool),
    "deadlineMs": st.one_of(_not_int, st.just(0), st.just(-5), st.just(86_400_001)),
}


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_wrong_type_for_any_run_param_is_invalid_params_naming_it(live: Live, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(RUN_FIELDS)), label="field")
    value = data.draw(RUN_FIELDS[name], label="value")
    params = {"prompt": "hi", "model": "text", name: value}
    error = error_of(live.bridge.call("pi/run", params))
    assert error["code"] == -32602, error
    assert name in error["message"], error


@settings(FUZZ, max_examples=20)
@given(value=st.one_of(st.none(), _not_str, st.just(""), st.just("bad id!"), st.just("x" * 129)))
def test_wrong_type_for_cancel_run_id_is_invalid_params_naming_it(live: Live, value: Any) -> None:
    error = error_of(live.bridge.call("pi/cancel", {"runId": value}))
    assert error["code"] == -32602 and "runId" in error["message"], error


known = {
    "prompt",
    "runId",
    "cwd",
    "provider",
    "model",
    "thinking",
    "tools",
    "sessionId",
    "continueSession",
    "retry",
    "liveThoughts",
    "deadlineMs",
}


@settings(FUZZ, max_examples=20)
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: k not in known), value=json_values)
def test_unknown_run_param_is_invalid_params_naming_it(live: Live, key: str, value: Any) -> None:
    error = error_of(live.bridge.call("pi/run", {"prompt": "hi", "model": "text", key: value}))
    assert error["code"] == -32602 and key in error["message"], error


@pytest.mark.parametrize("params", [[], "prompt", 5, True, ["hi"]])
def test_params_that_are_not_an_object_are_invalid_params(live: Live, params: Any) -> None:
    for method in ("pi/run", "pi/cancel"):
        assert error_of(live.bridge.call(method, params))["code"] == -32602


def test_pi_command_in_run_params_is_rejected(live: Live) -> None:
    params = {"prompt": "hi", "model": "argv", "piCommand": ["/bin/sh", "-c", "echo pwned"]}
    error = error_of(live.bridge.call("pi/run", params))
    assert error["code"] == -32602 and "piCommand" in error["message"]
    assert live.bridge.run_messages("pwned") == []


# Found by this suite: pydantic's lax mode coerces these, so a client's type error starts a run.
LAX_COERCED = [
    ("liveThoughts", "yes"),
    ("liveThoughts", 1),
    ("continueSession", "true"),
    ("continueSession", 0),
    ("deadlineMs", "60000"),
    ("deadlineMs", 60000.0),
    ("deadlineMs", True),
    ("retry", {"maxAttempts": "2"}),
]


@pytest.mark.parametrize(("name", "value"), LAX_COERCED, ids=[f"{n}={v!r}" for n, v in LAX_COERCED])
def test_lax_coercion_of_a_wrong_json_type_is_invalid_params(live: Live, name: str, value: Any) -> None:
    answer = live.bridge.call("pi/run", {"prompt": "hi", "model": "text", name: value})
    assert "error" in answer, (
        f"{name}={value!r} was accepted (coerced) and started run {answer['result']['runId']}"
    )
    assert answer["error"]["code"] == -32602 and name in answer["error"]["message"]


@pytest.mark.parametrize(
    ("method", "expect"), [("pi/runs", "result"), ("pi/run", -32602), ("pi/cancel", -32602)]
)
def test_request_without_params_member_is_answered_properly(live: Live, method: str, expect: Any) -> None:
    """JSON-RPC 2.0: `params` MAY be omitted. pi/runs takes none; the others name what is missing."""
    msg_id = live.bridge.new_id()
    live.bridge.send({"jsonrpc": "2.0", "id": msg_id, "method": method})
    answer = live.bridge.response(msg_id)
    if expect == "result":
        assert "result" in answer, answer
    else:
        assert error_of(answer)["code"] == expect, answer


# --------------------------------------------------------------------------- methods and ids

method_names = st.text(alphabet=string.ascii_letters + string.digits + "/$._-", min_size=1, max_size=20)


@FUZZ
@given(name=method_names, prefix=st.sampled_from(["fuzz/", "$/fuzz", "pi/fuzz"]), params=json_values)
def test_unknown_methods_are_method_not_found_and_unknown_notifications_ignored(
    live: Live, name: str, prefix: str, params: Any
) -> None:
    method = prefix + name
    bridge = live.bridge
    before = len(bridge.errors_with_null_id())
    answer = bridge.call(method, params)
    assert error_of(answer)["code"] == -32601, answer
    bridge.notify(method, params)
    good_run(bridge)
    assert bridge.errors_with_null_id()[before:] == [], "a notification must never be answered"


@pytest.mark.parametrize("method", ["initialized", "$/cancelRequest", "$/setTrace", "pi/message"])
def test_notification_method_sent_with_an_id_is_answered(live: Live, method: str) -> None:
    """JSON-RPC 2.0: a message with an id is a request and MUST get a response (error or result)."""
    params = {"id": 424242} if method == "$/cancelRequest" else {}
    msg_id = live.bridge.request(method, params)
    live.bridge.response(msg_id, timeout=2.0)
    good_run(live.bridge)


def test_pi_run_sent_as_a_notification_starts_no_run(live: Live) -> None:
    """A request method without an id can never be answered: it must not start an agent."""
    bridge = live.bridge
    bridge.notify("pi/run", {"prompt": "hi", "model": "text", "runId": "notification-run"})
    good_run(bridge)  # a barrier: frames are handled in order
    runs = bridge.call("pi/runs", {})["result"]["runs"]
    started = bridge.run_messages("notification-run") or [r for r in runs if r["runId"] == "notification-run"]
    if started:
        bridge.call("pi/cancel", {"runId": "notification-run"})
    assert not started, "a pi/run notification started a run that nobody can be answered about"


def test_other_notifications_without_id_are_ignored(live: Live) -> None:
    bridge = live.bridge
    before = len(bridge.errors_with_null_id())
    bridge.notify("pi/cancel", {"runId": "no-such-run"})
    bridge.notify("pi/runs", {})
    bridge.notify("$/cancelRequest", {"id": "never-sent"})
    good_run(bridge)
    assert bridge.errors_with_null_id()[before:] == []


def test_duplicate_request_ids_are_each_answered_and_streams_stay_apart(live: Live) -> None:
    bridge = live.bridge
    for run_id in ("dup-a", "dup-b"):
        bridge.request("pi/run", {"prompt": "hi", "model": "text", "runId": run_id}, msg_id="same-id")
    bridge.wait_until(lambda: len(bridge.responses.get("same-id", [])) == 2, what="two answers to id same-id")
    answers = bridge.responses["same-id"]
    assert sorted(a["result"]["runId"] for a in answers) == ["dup-a", "dup-b"]
    for run_id in ("dup-a", "dup-b"):
        assert_stream_invariants(bridge.run_messages(run_id))


def test_reusing_a_live_run_id_is_invalid_params(live: Live) -> None:
    error = error_of(live.bridge.call("pi/run", {"prompt": "hi", "model": "text", "runId": INFLIGHT}))
    assert error["code"] == -32602 and "runId" in error["message"]


def test_cancels_for_unknown_and_finished_runs(live: Live) -> None:
    bridge = live.bridge
    assert bridge.call("pi/cancel", {"runId": "never-existed"})["result"] == {
        "runId": "never-existed",
        "found": False,
    }
    finished = good_run(bridge, runId="finished-run")
    assert bridge.call("pi/cancel", {"runId": finished["runId"]})["result"]["found"] is False
    finished_id = bridge.request("pi/run", {"prompt": "hi", "model": "text"})
    bridge.response(finished_id)
    before = len(bridge.messages)
    bridge.notify("$/cancelRequest", {"id": finished_id})
    bridge.notify("$/cancelRequest", {"id": 987654321})
    bridge.notify("$/cancelRequest", {"id": "not-a-request"})
    good_run(bridge)
    assert len(bridge.responses[finished_id]) == 1, "a finished request must not be answered twice"
    assert all(m.get("id") is not None or "method" in m for m in bridge.messages[before:])


# --------------------------------------------------------------------------- lone surrogates, odd ids

# A string with one half of a UTF-16 pair in it (st.text draws no surrogates of its own).
lone_texts = st.tuples(st.text(max_size=4), st.integers(0xD800, 0xDFFF).map(chr), st.text(max_size=4)).map(
    "".join
)
holding_lone = st.recursive(
    lone_texts,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(
            st.text(string.ascii_letters, min_size=1, max_size=6), inner, min_size=1, max_size=3
        )
    ),
    max_leaves=4,
)


def send_escaped(bridge: RawBridge, payload: Any) -> None:
    """One frame of JSON with every non-ASCII character escaped (a lone surrogate as \\udXXX)."""
    bridge.send_bytes(frame(json.dumps(payload).encode()))


@FUZZ
@given(
    method=st.sampled_from(["pi/run", "pi/cancel", "pi/steer", "pi/sessions", "pi/runs", "initialize"]),
    key=st.text(string.ascii_letters, min_size=1, max_size=8),
    value=holding_lone,
)
def test_a_lone_surrogate_anywhere_in_params_is_invalid_params_naming_its_field(
    live: Live, method: str, key: str, value: Any
) -> None:
    bridge = live.bridge
    msg_id = bridge.new_id()
    params = {"prompt": "hi", "model": "text", "runId": "never-started", key: value}
    send_escaped(bridge, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    error = error_of(bridge.response(msg_id))
    assert error["code"] == -32602, error
    assert error["message"].startswith(f"invalid params: {key}"), error
    assert "lone surrogate" in error["message"], error
    good_run(bridge)
    assert bridge.run_messages("never-started") == []


odd_ids = st.one_of(
    lone_texts,
    st.booleans(),
    st.lists(json_scalars, max_size=3),
    st.dictionaries(st.text(max_size=4), json_scalars, max_size=3),
)


@FUZZ
@given(msg_id=odd_ids, method=st.sampled_from(["pi/run", "pi/runs", "pi/cancel", "shutdown"]))
def test_an_id_that_cannot_be_answered_under_is_invalid_request_with_id_null(
    live: Live, msg_id: Any, method: str
) -> None:
    """Nothing starts for it: not a run, not a shutdown."""
    bridge = live.bridge
    before = len(bridge.errors_with_null_id())
    params = {"prompt": "hi", "model": "text", "runId": "odd-id"} if method != "pi/runs" else {}
    send_escaped(bridge, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    good_run(bridge)
    nulls = bridge.errors_with_null_id()[before:]
    assert [n["error"]["code"] for n in nulls] == [-32600], nulls
    assert bridge.run_messages("odd-id") == []


# --------------------------------------------------------------------------- huge params


def test_50_mb_prompt_reaches_the_agent_intact(tmp_path: Path) -> None:
    """The prompt's bytes reach the agent's stdin exactly (checked by length and SHA-256)."""
    prompt = ("0123456789abcdef\u2028\u00e9\U0001f600 " * (50 * 1024 * 1024 // 28))[: 50 * 1024 * 1024]
    bridge = RawBridge()
    try:
        bridge.initialize({"piCommand": fake_pi_command(), "checkpoints": False})
        answer = bridge.call("pi/run", {"prompt": prompt, "model": "digest"}, timeout=120)
        result = answer["result"]
        encoded = prompt.encode()
        assert result["status"] == "completed", result
        assert result["text"] == f"len={len(encoded)} sha256={hashlib.sha256(encoded).hexdigest()}"
        good_run_digest = bridge.call("pi/run", {"prompt": "small", "model": "digest"})["result"]["text"]
        assert good_run_digest.startswith("len=5 ")
        assert bridge.shutdown() == 0
    finally:
        bridge.close()


@pytest.mark.slow
def test_50_mb_prompt_comes_back_intact_from_the_echo_agent(live: Live) -> None:
    """The fake pi's `echo` answers with the prompt: 50 MB in, the same 50 MB out, nothing lost."""
    prompt = ("hostile input " * (50 * 1024 * 1024 // 14 + 1))[: 50 * 1024 * 1024]
    answer = live.bridge.call(
        "pi/run", {"prompt": prompt, "model": "echo", "runId": "echo-50mb"}, timeout=120
    )
    result = answer["result"]
    messages = live.bridge.run_messages("echo-50mb")
    assert_stream_invariants(messages)
    assert result["status"] == "completed", {k: v for k, v in result.items() if k != "text"}
    assert len(result["text"]) == len(prompt) and result["text"] == prompt


# --------------------------------------------------------------------------- a second cancel during shutdown


def test_second_cancel_during_shutdown(fresh: RawBridge) -> None:
    """While `shutdown` stops a stubborn run, further pi/cancel and $/cancelRequest change nothing bad."""
    bridge = fresh
    run_request = bridge.request("pi/run", {"prompt": "x", "model": "stubborn", "runId": "stubborn-run"})
    bridge.wait_message("stubborn-run", "tool.update")
    shutdown_id = bridge.request("shutdown")
    first = bridge.request("pi/cancel", {"runId": "stubborn-run"})
    second = bridge.request("pi/cancel", {"runId": "stubborn-run"})
    bridge.notify("$/cancelRequest", {"id": run_request})
    assert "result" in bridge.response(shutdown_id)
    for msg_id in (first, second):
        answer = bridge.response(msg_id)
        if "result" in answer:
            receipt = answer["result"].get("shutdown")
            assert receipt is None or receipt["survivors"] == [], answer
    error = bridge.response(run_request)["error"]
    assert error["code"] == -32800 and error["data"]["shutdown"]["survivors"] == []
    messages = bridge.run_messages("stubborn-run")
    assert_stream_invariants(messages)
    assert [m["type"] for m in messages].count("terminal.cancelled") == 1
    assert len(bridge.responses[run_request]) == 1
    bridge.notify("exit")
    bridge.close_stdin()
    assert bridge.wait_exit() == 0
    no_run_processes(bridge)
