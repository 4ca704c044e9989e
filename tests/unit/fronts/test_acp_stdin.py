"""bridge/fronts/acp/first_frame.py: the `initialize` answered by hand before the SDK loads is the SDK's answer,
and only frames the SDK would take as they are get it."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import acp
import pytest
from acp import schema

from bridge.fronts.acp.first_frame import (
    ACP_PROTOCOL_VERSION,
    API_KEY_VARS,
    FirstFrame,
    initialize_result,
    plain_initialize,
)

# initialize params the hand path answers: each must be an InitializeRequest the SDK takes as is.
PLAIN: list[dict[str, Any]] = [
    {"protocolVersion": 1},
    {"protocolVersion": 0},
    {"protocolVersion": 7},
    {"protocolVersion": 65535, "clientCapabilities": None, "clientInfo": None, "_meta": None},
    {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": False}, "terminal": True},
        "clientInfo": {"name": "zed", "version": "0.200.0"},
        "_meta": {"zed.dev": {"anything": [1, 2]}},
    },
    # malformed capabilities and info: the SDK replaces them with defaults (salvage on error)
    {"protocolVersion": 1, "clientCapabilities": {"fs": "yes", "terminal": "no"}, "clientInfo": {"n": 1}},
    {"protocolVersion": 1, "unknownField": True},
]
# initialize params the hand path leaves to the SDK.
NOT_PLAIN: list[Any] = [
    {},
    {"protocolVersion": "1"},
    {"protocolVersion": "2024-11-05"},
    {"protocolVersion": True},
    {"protocolVersion": 1.0},
    {"protocolVersion": -1},
    {"protocolVersion": 65536},
    {"protocolVersion": 1, "_meta": {"piBridge": {"retry": {"maxAttempts": 3}}}},
    {"protocolVersion": 1, "_meta": {"piBridge": {}}},
    {"protocolVersion": 1, "_meta": {"protocol_version": 5}},
    {"protocolVersion": 1, "_meta": "text"},
    {"protocolVersion": 1, "clientCapabilities": "all"},
    {"protocolVersion": 1, "clientInfo": ["zed"]},
    {"protocolVersion": 1, "clientInfo": {"name": "x" * 70000, "version": "1"}},  # too long to be plain
    [1],
    None,
]


def _frame(params: Any, msg_id: Any = 1, method: str = "initialize") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()


def _sdk_answer(protocol_version: int) -> dict[str, Any]:
    """What the SDK path sends: AcpAgent.initialize's model, serialized as acp.Connection does."""
    model = schema.InitializeResponse.model_validate(initialize_result(protocol_version))
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


def test_acp_hand_initialize_speaks_the_sdk_protocol_version() -> None:
    assert ACP_PROTOCOL_VERSION == acp.PROTOCOL_VERSION


def test_acp_initialize_s_auth_methods_are_the_sdk_s_env_var_and_terminal_methods() -> None:
    by_hand = plain_initialize(_frame({"protocolVersion": 1}))
    assert by_hand is not None
    methods = schema.InitializeResponse.model_validate(by_hand["result"]).auth_methods or []
    assert [type(method) for method in methods] == [schema.EnvVarAuthMethod, schema.TerminalAuthMethod]
    env_var, terminal = methods
    assert isinstance(env_var, schema.EnvVarAuthMethod) and isinstance(terminal, schema.TerminalAuthMethod)
    assert [var.name for var in env_var.vars] == list(API_KEY_VARS)
    assert all(var.secret and var.optional for var in env_var.vars), "any one key is enough"
    assert terminal.args == ["--login"]
    assert by_hand["result"]["authMethods"] == _sdk_answer(1)["authMethods"]


@pytest.mark.parametrize("params", PLAIN)
def test_acp_plain_initialize_is_answered_by_hand_with_exactly_the_sdk_answer(params: dict[str, Any]) -> None:
    request = schema.InitializeRequest.model_validate(params)  # the SDK takes it as is
    answer = plain_initialize(_frame(params, msg_id="a-1"))
    assert answer is not None
    assert answer["jsonrpc"] == "2.0" and answer["id"] == "a-1"
    assert answer["result"] == _sdk_answer(request.protocol_version)
    assert answer["result"]["protocolVersion"] == min(request.protocol_version, acp.PROTOCOL_VERSION)


@pytest.mark.parametrize("params", NOT_PLAIN)
def test_acp_initialize_the_sdk_would_coerce_or_reject_is_left_to_it(params: Any) -> None:
    assert plain_initialize(_frame(params)) is None


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}',
        b'{"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}',
        b'{"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}',
        _frame({"protocolVersion": 1}, msg_id=True),
        _frame({"protocolVersion": 1}, msg_id=None),
        _frame({"protocolVersion": 1}, msg_id=[1]),
        _frame({"protocolVersion": 1}, method="session/new"),
        b"[]",
    ],
)
def test_acp_frames_that_are_no_initialize_request_are_left_to_the_sdk(line: bytes) -> None:
    assert plain_initialize(line) is None


def _run_first_frame(chunks: list[bytes], close: bool = True) -> tuple[FirstFrame, bytes]:
    """A FirstFrame over pipes fed `chunks`; returns it (done) and what it wrote."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    first = FirstFrame(in_read, out_write)
    done = threading.Event()
    first.when_done(done.set)
    first._thread.start()
    for chunk in chunks:
        os.write(in_write, chunk)
    if close:
        os.close(in_write)
    assert done.wait(10), "the first-frame thread never finished"
    os.close(out_write)
    written = b""
    while data := os.read(out_read, 1 << 16):
        written += data
    for fd in (in_read, out_read, *([] if close else [in_write])):
        os.close(fd)
    return first, written


def test_acp_first_frame_answers_a_plain_initialize_and_hands_on_what_follows() -> None:
    rest = b'{"jsonrpc":"2.0","id":2,"method":"session/new"}\npartial'
    first, written = _run_first_frame([_frame({"protocolVersion": 1}) + b"\n" + rest], close=False)
    assert first.answered and not first.eof
    assert first.rest == rest
    assert json.loads(written) == {"jsonrpc": "2.0", "id": 1, "result": _sdk_answer(1)}
    assert written.endswith(b"\n") and written.count(b"\n") == 1


def test_acp_first_frame_split_across_writes_is_still_answered() -> None:
    line = _frame({"protocolVersion": 1}) + b"\n"
    first, written = _run_first_frame([line[:10], line[10:30], line[30:]], close=False)
    assert first.answered and first.rest == b""
    assert json.loads(written)["result"] == _sdk_answer(1)


def test_acp_first_frame_that_is_not_plain_is_handed_on_whole_and_unanswered() -> None:
    line = _frame({"protocolVersion": 1, "_meta": {"piBridge": {"retry": {"maxAttempts": 2}}}}) + b"\n"
    first, written = _run_first_frame([line + b"more"])
    assert not first.answered and written == b""
    assert first.rest == line + b"more"


def test_acp_first_frame_at_end_of_input_hands_on_what_came() -> None:
    first, written = _run_first_frame([b'{"jsonrpc": "2.0", "id": 1'])
    assert first.eof and not first.answered and written == b""
    assert first.rest == b'{"jsonrpc": "2.0", "id": 1'
    first, _ = _run_first_frame([])
    assert first.eof and first.rest == b""
