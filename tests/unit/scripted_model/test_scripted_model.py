"""Tests for bridge.scripted_model.http_server: every scenario over raw HTTP, plus one run of the real pi."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import pathlib
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bridge.scripted_model import (
    ANTHROPIC_SIGNATURE,
    ANTHROPIC_TEXT,
    ANTHROPIC_THOUGHT,
    DROP_TEXT,
    FILE_TOOL_CALLS,
    FILE_TOOL_PREAMBLE,
    FLOOD_CHARS,
    FLOOD_PIECES,
    LENGTH_TEXT,
    SCENARIOS,
    TEXT_REPLY,
    THINKING_ANSWER,
    THINKING_THOUGHT,
    TOOL_COMMANDS,
    TOOL_PREAMBLE,
    UNICODE_REPLY,
    ScriptedModelServer,
    flood_piece,
    last_user_text_of,
    long_reply_text,
    tool_answer_text,
    write_pi_agent_dir,
)
from bridge.scripted_model.request_body import user_images_of
from bridge.scripted_model.scenarios import MAX_TEXT_PIECES, SCRIPT_UNREADABLE
from tests.support.env import ROOT, requires_pi

REPO = ROOT
TIMEOUT = 10.0

# ------------------------------------------------------------------------------------------------
# helpers


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(delay_scale=0.0) as srv:
        yield srv


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(0.01)
    return True


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def openai_body(model: str, messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages or [{"role": "system", "content": "sys"}, user("Say hello")],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def post(
    srv: ScriptedModelServer,
    body: dict[str, Any] | bytes,
    path: str = "/v1/chat/completions",
) -> Response:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=TIMEOUT)
    try:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return Response(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def chat(srv: ScriptedModelServer, model: str, **kw: Any) -> Response:
    return post(srv, openai_body(model, **kw))


def sse_data(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, split on blank lines (``\\n`` only)."""
    out = []
    for event in body.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(line[len(b"data: ") :].decode("utf-8"))
    return out


def openai_chunks(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(d) for d in sse_data(body) if d != "[DONE]"]


def deltas(chunks: list[dict[str, Any]], key: str) -> list[str]:
    return [
        c["choices"][0]["delta"][key] for c in chunks if c["choices"] and c["choices"][0]["delta"].get(key)
    ]


def finish_reasons(chunks: list[dict[str, Any]]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
    ]


def tool_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]


def anthropic_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.split(b"\n\n"):
        name, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[len(b"event: ") :].decode()
            elif line.startswith(b"data: "):
                data = json.loads(line[len(b"data: ") :])
        if name is not None and data is not None:
            assert data["type"] == name
            events.append((name, data))
    return events


def tool_result_messages(model: str, output: str) -> list[dict[str, Any]]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "bash",
            "arguments": json.dumps({"command": TOOL_COMMANDS[model]}),
        },
    }
    return [
        {"role": "system", "content": "sys"},
        user("Say hello"),
        {"role": "assistant", "content": TOOL_PREAMBLE, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": output},
    ]


# ------------------------------------------------------------------------------------------------
# OpenAI format scenarios


def test_scenarios_cover_the_brief() -> None:
    required = {
        "text", "thinking", "thinking_anthropic", "tool", "toolfail", "toolbig", "toolslow",
        "unicode", "length", "err500", "err429", "err401", "flaky", "drop", "slow", "long",
        "echo", "hang",
    }  # fmt: skip
    assert required <= set(SCENARIOS)
    assert {"long-20000", "long-100000"} <= set(SCENARIOS)
    assert all(isinstance(v, str) and v for v in SCENARIOS.values())


def test_text_streams_word_by_word_with_usage_and_done(
    server: ScriptedModelServer,
) -> None:
    resp = chat(server, "text")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    data = sse_data(resp.body)
    assert data[-1] == "[DONE]"
    chunks = openai_chunks(resp.body)
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert c["model"] == "text"
        assert isinstance(c["created"], int)
    pieces = deltas(chunks, "content")
    assert "".join(pieces) == TEXT_REPLY
    assert len(pieces) == len(TEXT_REPLY.split(" "))
    assert finish_reasons(chunks) == ["stop"]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] > 0


def test_delays_make_streaming_observable() -> None:
    with ScriptedModelServer(delay_scale=1.0) as srv:
        start = time.monotonic()
        resp = chat(srv, "text")
        elapsed = time.monotonic() - start
    assert resp.status == 200
    # 30 pieces at 5 ms each: the answer cannot arrive all at once.
    assert elapsed >= 0.1


def test_thinking_sends_reasoning_before_text(server: ScriptedModelServer) -> None:
    chunks = openai_chunks(chat(server, "thinking").body)
    assert "".join(deltas(chunks, "reasoning_content")) == THINKING_THOUGHT
    assert "".join(deltas(chunks, "content")) == THINKING_ANSWER
    kinds = [
        "r" if c["choices"][0]["delta"].get("reasoning_content") else "t"
        for c in chunks
        if c["choices"]
        and (c["choices"][0]["delta"].get("reasoning_content") or c["choices"][0]["delta"].get("content"))
    ]
    assert kinds == sorted(kinds)  # all "r" before any "t"
    assert finish_reasons(chunks) == ["stop"]


@pytest.mark.parametrize("model", sorted(TOOL_COMMANDS))
def test_tool_scenarios_call_bash_then_answer(server: ScriptedModelServer, model: str) -> None:
    chunks = openai_chunks(chat(server, model).body)
    assert "".join(deltas(chunks, "content")) == TOOL_PREAMBLE
    calls = tool_calls(chunks)
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "bash"
    assert len(calls) > 2  # arguments arrive in fragments
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert json.loads(arguments) == {"command": TOOL_COMMANDS[model]}
    assert finish_reasons(chunks) == ["tool_calls"]

    second = openai_chunks(chat(server, model, messages=tool_result_messages(model, "hi\n")).body)
    assert tool_calls(second) == []
    assert "".join(deltas(second, "content")) == tool_answer_text(model, "hi\n")
    assert finish_reasons(second) == ["stop"]


@pytest.mark.parametrize("model", sorted(FILE_TOOL_CALLS))
def test_file_tool_scenarios_call_pi_s_edit_and_write_then_answer(
    server: ScriptedModelServer, model: str
) -> None:
    name, expected = FILE_TOOL_CALLS[model]
    chunks = openai_chunks(chat(server, model).body)
    assert "".join(deltas(chunks, "content")) == FILE_TOOL_PREAMBLE
    calls = tool_calls(chunks)
    assert calls[0]["function"]["name"] == name == model
    assert json.loads("".join(tc["function"].get("arguments", "") for tc in calls)) == expected
    assert finish_reasons(chunks) == ["tool_calls"]
    answered = tool_result_messages("tool", "Successfully wrote to f")
    second = openai_chunks(chat(server, model, messages=answered).body)
    assert "".join(deltas(second, "content")) == "The tool said: Successfully wrote to f Done."

    events = anthropic_events(post(server, anthropic_body(model), path="/v1/messages").body)
    blocks = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"] and blocks[1]["name"] == name


@pytest.mark.parametrize(("model", "tool"), [("writepath", "write"), ("editpath", "edit")])
def test_path_scenarios_call_the_file_tool_on_the_path_the_prompt_names(
    server: ScriptedModelServer, model: str, tool: str
) -> None:
    hostile = "/dev/stdin\u0000 and more"
    chunks = openai_chunks(chat(server, model, messages=[user(hostile)]).body)
    calls = tool_calls(chunks)
    assert calls[0]["function"]["name"] == tool
    arguments = json.loads("".join(tc["function"].get("arguments", "") for tc in calls))
    assert arguments == {**FILE_TOOL_CALLS[tool][1], "path": hostile}
    assert finish_reasons(chunks) == ["tool_calls"]


def test_flood_streams_numbered_thousand_char_deltas(server: ScriptedModelServer) -> None:
    pieces = deltas(openai_chunks(chat(server, "flood").body), "content")
    assert len(pieces) == FLOOD_PIECES and {len(p) for p in pieces} == {FLOOD_CHARS}
    assert pieces == [flood_piece(i) for i in range(FLOOD_PIECES)]


def test_tool_answers_follow_the_captures() -> None:
    assert tool_answer_text("tool", "hi\n") == "The command printed: hi. Done."
    assert tool_answer_text("toolslow", "whatever") == "done"
    big = tool_answer_text("toolbig", "\n".join(str(i) for i in range(1, 3000)))
    assert big.startswith("The command printed: 1\n2\n3\n ... ") and big.endswith(". Done.")
    assert len(big) < 200


def test_a_long_answer_streams_whole_in_a_bounded_number_of_pieces_of_whole_words(
    server: ScriptedModelServer,
) -> None:
    output = " ".join(f"w{i}" for i in range(1000)) + "\n"
    chunks = openai_chunks(chat(server, "tool", messages=tool_result_messages("tool", output)).body)
    pieces = deltas(chunks, "content")
    assert "".join(pieces) == tool_answer_text("tool", output)
    assert 1 < len(pieces) <= MAX_TEXT_PIECES
    assert all(piece.endswith(" ") for piece in pieces[:-1]), "a piece ends on a word's end"
    # A short answer still streams word by word.
    assert (
        len(
            deltas(
                openai_chunks(chat(server, "tool", messages=tool_result_messages("tool", "hi\n")).body),
                "content",
            )
        )
        > 3
    )


def test_tool_decision_comes_from_messages_not_a_counter(
    server: ScriptedModelServer,
) -> None:
    answered = chat(server, "tool", messages=tool_result_messages("tool", "hi\n"))
    assert tool_calls(openai_chunks(answered.body)) == []
    # A fresh conversation after an answered one (or concurrently) gets a tool call again.
    assert tool_calls(openai_chunks(chat(server, "tool").body))
    assert tool_calls(openai_chunks(chat(server, "tool").body))


def test_tool_result_as_content_parts(server: ScriptedModelServer) -> None:
    messages = tool_result_messages("tool", "")
    messages[-1]["content"] = [{"type": "text", "text": "hi\n"}]
    chunks = openai_chunks(chat(server, "tool", messages=messages).body)
    assert "".join(deltas(chunks, "content")) == "The command printed: hi. Done."


def test_unicode_goes_over_the_wire_raw(server: ScriptedModelServer) -> None:
    resp = chat(server, "unicode")
    for raw in ("\u2028", "\u2029", "\u0085", "\U0001f600", "\u4f60", "e\u0301"):
        assert raw.encode() in resp.body
    assert "".join(deltas(openai_chunks(resp.body), "content")) == UNICODE_REPLY
    assert '"' in UNICODE_REPLY and "\\" in UNICODE_REPLY and "\r\n" in UNICODE_REPLY


def test_length_finishes_with_length(server: ScriptedModelServer) -> None:
    chunks = openai_chunks(chat(server, "length").body)
    assert "".join(deltas(chunks, "content")) == LENGTH_TEXT
    assert finish_reasons(chunks) == ["length"]


@pytest.mark.parametrize(("model", "status"), [("err500", 500), ("err429", 429), ("err401", 401)])
def test_error_scenarios(server: ScriptedModelServer, model: str, status: int) -> None:
    for _ in range(2):  # every time, not just once
        resp = chat(server, model)
        assert resp.status == status
        assert resp.headers["Content-Type"] == "application/json"
        error = resp.json()["error"]
        assert error["message"] and error["type"]
    if model == "err429":
        assert resp.headers["Retry-After"] == "0"


def test_flaky_fails_twice_then_answers_and_reset_rearms(
    server: ScriptedModelServer,
) -> None:
    statuses = [chat(server, "flaky").status for _ in range(3)]
    assert statuses == [500, 500, 200]
    ok = chat(server, "flaky")
    assert ok.status == 200
    assert "".join(deltas(openai_chunks(ok.body), "content")) == TEXT_REPLY
    server.reset()
    assert server.requests == []
    assert chat(server, "flaky").status == 500


def test_drop_ends_without_finish_reason_or_done(server: ScriptedModelServer) -> None:
    resp = chat(server, "drop")
    assert resp.status == 200
    assert "[DONE]" not in sse_data(resp.body)
    chunks = openai_chunks(resp.body)
    assert finish_reasons(chunks) == []
    assert "".join(deltas(chunks, "content")) == DROP_TEXT


@pytest.mark.parametrize(("model", "count"), [("long", 2000), ("long-20000", 20000), ("long-7", 7)])
def test_long_streams_n_five_char_deltas(server: ScriptedModelServer, model: str, count: int) -> None:
    chunks = openai_chunks(chat(server, model).body)
    pieces = deltas(chunks, "content")
    assert len(pieces) == count
    assert {len(p) for p in pieces} == {5}
    assert "".join(pieces) == long_reply_text(count)
    assert finish_reasons(chunks) == ["stop"]


@pytest.mark.parametrize("model", ["nosuch", "long-0", "long-x", "long-"])
def test_unknown_model_is_404(server: ScriptedModelServer, model: str) -> None:
    resp = chat(server, model)
    assert resp.status == 404
    assert resp.json()["error"]["message"] == f"model {model} not found"


def test_echo_repeats_the_last_user_text_verbatim(server: ScriptedModelServer) -> None:
    text = 'multi\nline "q" \\ @file -flag \u2028 \U0001f600 e\u0301 end\n'
    messages = [
        {"role": "system", "content": "sys"},
        user("first"),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": text},  # plain-string content
    ]
    chunks = openai_chunks(chat(server, "echo", messages=messages).body)
    assert "".join(deltas(chunks, "content")) == "ECHO:" + text
    assert server.last_user_text() == text
    assert server.last_user_text("echo") == text
    assert server.last_user_text("text") is None


def test_requests_are_recorded(server: ScriptedModelServer) -> None:
    chat(server, "text")
    chat(server, "echo")
    chat(server, "text")
    reqs = server.requests
    assert [(r["model"], r["n"]) for r in reqs] == [
        ("text", 1),
        ("echo", 1),
        ("text", 2),
    ]
    assert all(r["path"] == "/v1/chat/completions" for r in reqs)
    assert reqs[0]["body"]["messages"][-1] == user("Say hello")
    assert reqs[0]["t"] <= reqs[1]["t"] <= reqs[2]["t"]
    assert server.last_user_text() == "Say hello"
    server.reset()
    assert server.requests == []
    chat(server, "text")
    assert server.requests[0]["n"] == 1


def test_record_path_gets_every_request_as_a_json_line(tmp_path: pathlib.Path) -> None:
    record = tmp_path / "requests.jsonl"
    with ScriptedModelServer(record_path=record) as srv:
        chat(srv, "echo")
        chat(srv, "text", messages=[user("first"), user("second")])
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert [(r["model"], r["n"], r["path"]) for r in lines] == [
        ("echo", 1, "/v1/chat/completions"),
        ("text", 1, "/v1/chat/completions"),
    ]
    assert lines[1]["body"]["messages"] == [user("first"), user("second")]


def test_bad_requests(server: ScriptedModelServer) -> None:
    assert post(server, b"not json").status == 400
    assert post(server, b"[1, 2]").status == 400
    assert post(server, openai_body("text"), path="/v1/nope").status == 404
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    conn.request("GET", "/v1/models")
    listing = json.loads(conn.getresponse().read())
    conn.close()
    assert {m["id"] for m in listing["data"]} == set(SCENARIOS)


def test_base_url_and_loopback_only() -> None:
    with ScriptedModelServer() as srv:
        assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
        assert srv.port > 0
    with pytest.raises(ValueError):
        ScriptedModelServer(host="0.0.0.0")


# ------------------------------------------------------------------------------------------------
# Timing, disconnects, concurrency


def open_stream(srv: ScriptedModelServer, model: str) -> tuple[socket.socket, Any]:
    """Send a streaming request on a raw socket; returns the socket and a reader on it."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT)
    payload = json.dumps(openai_body(model)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock, sock.makefile("rb")


def read_data_line(reader: Any) -> bytes:
    while True:
        line: bytes = reader.readline()
        if not line or line.startswith(b"data: "):
            return line


def test_slow_streams_slowly_and_stops_when_the_client_leaves() -> None:
    with ScriptedModelServer(delay_scale=0.0) as srv:  # slow ignores delay_scale
        sock, reader = open_stream(srv, "slow")
        assert reader.readline().startswith(b"HTTP/1.1 200")
        read_data_line(reader)  # role chunk, sent at once
        first = read_data_line(reader)
        t0 = time.monotonic()
        second = read_data_line(reader)
        gap = time.monotonic() - t0
        assert b'"content"' in first and b'"content"' in second
        assert 0.2 <= gap <= 2.0
        assert srv.open_connections == 1
        reader.close()
        sock.close()
        assert wait_until(lambda: srv.open_connections == 0, timeout=3.0)


def test_hang_sends_nothing_and_stop_is_prompt() -> None:
    srv = ScriptedModelServer().start()
    sock, reader = open_stream(srv, "hang")
    sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(TIMEOUT)
    slow_sock, slow_reader = open_stream(srv, "slow")
    assert slow_reader.readline().startswith(b"HTTP/1.1 200")
    assert wait_until(lambda: srv.open_connections == 2)
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 2.0
    assert sock.recv(1) == b""  # the hung request is closed, without any answer
    assert slow_reader.read() is not None  # reads to EOF instead of blocking for 30 s
    for closable in (reader, sock, slow_reader, slow_sock):
        closable.close()


def test_fifty_concurrent_requests() -> None:
    with ScriptedModelServer(delay_scale=1.0) as srv:

        def one(i: int) -> str:
            model = "echo" if i % 2 else "text"
            body = openai_body(model, messages=[user(f"prompt {i}")])
            return "".join(deltas(openai_chunks(post(srv, body).body), "content"))

        # All 50 in flight at once: each stream takes >= 30 x 5 ms.
        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(one, range(50), timeout=30))
        expected = [f"ECHO:prompt {i}" if i % 2 else TEXT_REPLY for i in range(50)]
        assert results == expected
        text_ns = sorted(r["n"] for r in srv.requests if r["model"] == "text")
        assert text_ns == list(range(1, 26))


# ------------------------------------------------------------------------------------------------
# Anthropic format


def anthropic_body(model: str, messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": "sys"}],
        "messages": messages or [user("Say hello")],
    }


def test_anthropic_thinking_event_sequence(server: ScriptedModelServer) -> None:
    resp = post(server, anthropic_body("thinking_anthropic"), path="/v1/messages?beta=true")
    assert resp.status == 200
    events = anthropic_events(resp.body)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    delta_types = [d["delta"]["type"] for n, d in events if n == "content_block_delta"]
    # Signature is the last delta of the thinking block, before its content_block_stop.
    sig_at = delta_types.index("signature_delta")
    assert set(delta_types[:sig_at]) == {"thinking_delta"}
    assert set(delta_types[sig_at + 1 :]) == {"text_delta"}
    assert names[names.index("content_block_delta") + sig_at + 1] == "content_block_stop"
    thought = "".join(d["delta"].get("thinking", "") for n, d in events if n == "content_block_delta")
    text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
    sig = "".join(d["delta"].get("signature", "") for n, d in events if n == "content_block_delta")
    assert (thought, text, sig) == (
        ANTHROPIC_THOUGHT,
        ANTHROPIC_TEXT,
        ANTHROPIC_SIGNATURE,
    )
    message_delta = events[-2][1]
    assert message_delta["delta"]["stop_reason"] == "end_turn"
    assert message_delta["usage"]["output_tokens"] > 0
    assert events[0][1]["message"]["usage"]["input_tokens"] > 0
    assert server.requests[-1]["path"] == "/v1/messages?beta=true"


def test_anthropic_tool_round_trip(server: ScriptedModelServer) -> None:
    events = anthropic_events(post(server, anthropic_body("tool"), path="/v1/messages").body)
    blocks = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[1]["name"] == "bash"
    partial = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"command": "echo hi"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

    tool_id = blocks[1]["id"]
    use = {"type": "tool_use", "id": tool_id, "name": "bash", "input": {"command": "echo hi"}}
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": [{"type": "text", "text": "hi\n"}]}
    messages = [
        user("Say hello"),
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    answer = anthropic_events(post(server, anthropic_body("tool", messages), path="/v1/messages").body)
    text = "".join(d["delta"].get("text", "") for n, d in answer if n == "content_block_delta")
    assert text == "The command printed: hi. Done."
    assert server.last_user_text() == "Say hello"  # a tool_result is not user text


def test_anthropic_errors_and_drop(server: ScriptedModelServer) -> None:
    resp = post(server, anthropic_body("err401"), path="/v1/messages")
    assert resp.status == 401
    assert resp.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "fake invalid API key"},
    }
    assert post(server, anthropic_body("nosuch"), path="/v1/messages").status == 404
    names = [n for n, _ in anthropic_events(post(server, anthropic_body("drop"), path="/v1/messages").body)]
    assert "message_stop" not in names and "message_delta" not in names


# ------------------------------------------------------------------------------------------------
# pi configuration and command line


def test_write_pi_agent_dir(tmp_path: pathlib.Path) -> None:
    agent = tmp_path / "a" / "b"
    write_pi_agent_dir(agent, "http://127.0.0.1:1234/v1")
    models = json.loads((agent / "models.json").read_text())
    fake = models["providers"]["fake"]
    assert fake["baseUrl"] == "http://127.0.0.1:1234/v1"
    assert fake["api"] == "openai-completions" and fake["apiKey"] == "x"
    assert fake["compat"] == {
        "supportsDeveloperRole": False,
        "supportsReasoningEffort": False,
    }
    assert [m["id"] for m in fake["models"]] == list(SCENARIOS)
    assert [m["name"] for m in fake["models"]] == list(SCENARIOS.values()), "named after what it does"
    anthropic = models["providers"]["fake-anthropic"]
    assert anthropic["api"] == "anthropic-messages"
    assert anthropic["baseUrl"] == "http://127.0.0.1:1234"
    assert "thinking_anthropic" in [m["id"] for m in anthropic["models"]]
    assert not (agent / "settings.json").exists()

    write_pi_agent_dir(agent, "http://127.0.0.1:1/v1", provider="p", disable_pi_retry=True)
    assert set(json.loads((agent / "models.json").read_text())["providers"]) == {
        "p",
        "p-anthropic",
    }
    settings = json.loads((agent / "settings.json").read_text())
    assert settings == {"retry": {"enabled": False, "provider": {"maxRetries": 0}}}


def test_command_line_serves_until_sigterm(tmp_path: pathlib.Path) -> None:
    agent = tmp_path / "agent"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.scripted_model", "--agent-dir", str(agent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=TIMEOUT), "no startup line"
        info = json.loads(proc.stdout.readline())
        assert set(info) == {"baseUrl", "port"}
        assert info["baseUrl"] == f"http://127.0.0.1:{info['port']}/v1"
        models = json.loads((agent / "models.json").read_text())
        assert models["providers"]["fake"]["baseUrl"] == info["baseUrl"]
        conn = http.client.HTTPConnection("127.0.0.1", info["port"], timeout=TIMEOUT)
        conn.request("POST", "/v1/chat/completions", json.dumps(openai_body("text")))
        assert conn.getresponse().status == 200
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == 0
        assert proc.stdout.read() == b""  # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)


# ------------------------------------------------------------------------------------------------
# The real pi CLI


def find_pi() -> str | None:
    tools = REPO / ".tools" / "node_modules" / ".bin"
    path = os.environ.get("PATH", "")
    if tools.is_dir():
        path = f"{tools}{os.pathsep}{path}"
    return shutil.which("pi", path=path)


def pi_events(stdout: bytes) -> list[dict[str, Any]]:
    # Split on b"\n" only: pi writes raw U+2028/U+2029/U+0085 inside JSON strings.
    return [json.loads(line) for line in stdout.split(b"\n") if line.strip()]


@requires_pi
@pytest.mark.realpi
@pytest.mark.parametrize("scenario", ["text", "thinking", "tool", "unicode"])
def test_real_pi_against_the_server(tmp_path: pathlib.Path, scenario: str) -> None:
    pi = find_pi()
    assert pi is not None, "pi is not installed"
    agent = tmp_path / "agent"
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedModelServer() as srv:
        write_pi_agent_dir(agent, srv.base_url, disable_pi_retry=True)
        env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent))
        env["PATH"] = f"{pathlib.Path(pi).parent}{os.pathsep}{env.get('PATH', '')}"
        argv = [pi, "--offline", "--mode", "json", "--no-session"]
        argv += ["--provider", "fake", "--model", scenario]
        proc = subprocess.run(
            argv,
            check=False,
            input=b"Say hello",
            capture_output=True,
            env=env,
            cwd=work,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        events = pi_events(proc.stdout)
        assert srv.last_user_text(scenario) == "Say hello"

    assert events[0]["type"] == "session"
    finals = [
        e["message"] for e in events if e["type"] == "message_end" and e["message"].get("role") == "assistant"
    ]
    assert finals, [e["type"] for e in events]
    last = finals[-1]
    assert last["stopReason"] == "stop", last.get("errorMessage")
    text = "".join(c["text"] for c in last["content"] if c["type"] == "text")
    streamed = "".join(
        e["assistantMessageEvent"]["delta"]
        for e in events
        if e["type"] == "message_update" and e["assistantMessageEvent"]["type"] == "text_delta"
    )
    if scenario == "text":
        assert text == TEXT_REPLY == streamed
    elif scenario == "thinking":
        assert text == THINKING_ANSWER
        thoughts = [c["thinking"] for c in last["content"] if c["type"] == "thinking"]
        assert thoughts == [THINKING_THOUGHT]
        kinds = {e["assistantMessageEvent"]["type"] for e in events if e["type"] == "message_update"}
        assert {"thinking_start", "thinking_delta", "thinking_end"} <= kinds
    elif scenario == "tool":
        ends = [e for e in events if e["type"] == "tool_execution_end"]
        assert len(ends) == 1 and ends[0]["isError"] is False
        output = "".join(c["text"] for c in ends[0]["result"]["content"] if c["type"] == "text")
        assert output.strip() == "hi"
        assert text == "The command printed: hi. Done."
        assert len(finals) == 2 and finals[0]["stopReason"] == "toolUse"
    else:
        assert text == UNICODE_REPLY == streamed


# ------------------------------------------------------------------ Claude Code's requests

CLAUDE_TOOLS = [
    {"name": "Bash", "input_schema": {"properties": {"command": {}, "timeout": {}}}},
    {"name": "Read", "input_schema": {"properties": {"file_path": {}}}},
    {"name": "Edit", "input_schema": {"properties": {"file_path": {}, "old_string": {}, "new_string": {}}}},
    {"name": "Write", "input_schema": {"properties": {"file_path": {}, "content": {}}}},
]


def anthropic_tool_use(
    server: ScriptedModelServer, model: str, messages: list[dict[str, Any]]
) -> dict[str, Any]:
    body = {"model": model, "stream": True, "tools": CLAUDE_TOOLS, "messages": messages,
            "system": [{"type": "text", "text": "Primary working directory: /home/user/project\n"}]}  # fmt: skip
    response = post(server, body, "/v1/messages?beta=true")
    assert response.status == 200
    events = [json.loads(d) for d in sse_data(response.body)]
    start = next(
        e for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    )
    arguments = "".join(
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["index"] == start["index"]
    )
    return {"name": start["content_block"]["name"], "input": json.loads(arguments)}


def test_tools_are_called_in_the_schema_the_request_offers(server: ScriptedModelServer) -> None:
    prompt = [{"role": "user", "content": "go"}]
    assert anthropic_tool_use(server, "tool", prompt) == {"name": "Bash", "input": {"command": "echo hi"}}
    path = "/home/user/project/created/new.txt"
    written = anthropic_tool_use(server, "write", prompt)
    assert written == {"name": "Write", "input": {"file_path": path, "content": "first line\nsecond line\n"}}


def test_an_edit_in_claude_codes_schema_reads_the_file_first(server: ScriptedModelServer) -> None:
    prompt = [{"role": "user", "content": "go"}]
    notes = "/home/user/project/notes.txt"
    assert anthropic_tool_use(server, "edit", prompt) == {"name": "Read", "input": {"file_path": notes}}
    after_read = [
        *prompt,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "line one"}]},
    ]
    edit = anthropic_tool_use(server, "edit", after_read)
    assert edit == {
        "name": "Edit",
        "input": {"file_path": notes, "old_string": "line two", "new_string": "line 2, edited"},
    }


def test_count_tokens_answers_an_estimate(server: ScriptedModelServer) -> None:
    body = {"model": "text", "messages": [{"role": "user", "content": "hello there"}]}
    response = post(server, body, "/v1/messages/count_tokens?beta=true")
    assert response.status == 200 and response.json()["input_tokens"] >= 1


def test_context_an_agent_adds_before_the_prompt_is_not_the_users_text(server: ScriptedModelServer) -> None:
    content = [
        {"type": "text", "text": "<system-reminder>\ncontext\n</system-reminder>"},
        {"type": "text", "text": "-p hi"},
    ]
    assert last_user_text_of({"messages": [{"role": "user", "content": content}]}) == "-p hi"


def test_get_requests_answers_each_model_request_with_its_user_texts(server: ScriptedModelServer) -> None:
    chat(server, "text", messages=[user("first"), {"role": "assistant", "content": "ok"}, user("second")])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    conn.request("GET", "/_scripted/requests")
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    conn.close()
    assert resp.status == 200
    assert answer == {
        "requests": [{"model": "text", "n": 1, "userTexts": ["first", "second"], "userImages": []}]
    }
    assert len(server.requests) == 1, "asking for the requests is not itself recorded"


def test_a_user_images_are_read_in_both_formats_as_data_urls() -> None:
    """An editor's test sees a pasted image reach the model: /_scripted/requests lists it."""
    openai = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
    anthropic = {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"}}
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "see"}, openai]},
            {"role": "assistant", "content": [anthropic]},
            {"role": "user", "content": [anthropic]},
        ]
    }
    assert user_images_of(body) == ["data:image/png;base64,iVBO", "data:image/gif;base64,R0lG"]


# ------------------------------------------------------------------------------------------------
# script: the calls come from the prompt


SCRIPT = [["bash", {"command": "echo one"}], ["read", {"path": "notes.txt"}]]


def _offering(*tools: tuple[str, list[str]]) -> list[dict[str, Any]]:
    """OpenAI tool specs offering `tools` (name, argument names)."""
    return [
        {
            "type": "function",
            "function": {"name": name, "parameters": {"properties": {key: {} for key in args}}},
        }
        for name, args in tools
    ]


def _call_of(chunks: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    calls = tool_calls(chunks)
    return calls[0]["function"]["name"], json.loads(
        "".join(tc["function"].get("arguments", "") for tc in calls)
    )


def _answered(prompt: str, *outputs: str) -> list[dict[str, Any]]:
    """A conversation: the prompt, then one assistant call and its tool result per output."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, user(prompt)]
    for i, output in enumerate(outputs):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
        ]
    return messages


def test_script_makes_the_prompt_s_calls_one_by_one_then_answers_every_result(
    server: ScriptedModelServer,
) -> None:
    prompt = json.dumps(SCRIPT)
    tools = _offering(("bash", ["command"]), ("read", ["path", "offset"]))
    first = openai_chunks(post(server, {**openai_body("script", [user(prompt)]), "tools": tools}).body)
    assert _call_of(first) == ("bash", {"command": "echo one"})
    assert finish_reasons(first) == ["tool_calls"]
    second_body = {**openai_body("script", _answered(prompt, "one")), "tools": tools}
    second = openai_chunks(post(server, second_body).body)
    assert _call_of(second) == ("read", {"path": "notes.txt"})
    assert "".join(deltas(second, "content")) == ""
    last = openai_chunks(post(server, openai_body("script", _answered(prompt, "one", "two"))).body)
    assert "".join(deltas(last, "content")) == "The tools said:\n[1] one\n[2] two\nDone."
    assert finish_reasons(last) == ["stop"]


def test_script_maps_names_and_arguments_to_claude_s_tools(server: ScriptedModelServer) -> None:
    prompt = json.dumps(
        [
            ["read", {"path": "~/.ssh/id_rsa"}],
            ["edit", {"path": "a.txt", "edits": [{"oldText": "x", "newText": "y"}]}],
        ]
    )
    tools = [
        {"name": "Read", "input_schema": {"properties": {"file_path": {}}}},
        {
            "name": "Edit",
            "input_schema": {"properties": {"file_path": {}, "old_string": {}, "new_string": {}}},
        },
    ]
    body = {**anthropic_body("script", [user(prompt)]), "tools": tools}
    body["system"] = [{"type": "text", "text": "Working directory: /work/here\nOther context"}]
    events = anthropic_events(post(server, body, path="/v1/messages").body)
    (block,) = [
        d["content_block"]
        for n, d in events
        if n == "content_block_start" and d["content_block"]["type"] == "tool_use"
    ]
    args = "".join(d["delta"].get("partial_json", "") for n, d in events if n == "content_block_delta")
    assert (block["name"], json.loads(args)) == ("Read", {"file_path": "~/.ssh/id_rsa"})
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "k"}]}
    body["messages"] = [user(prompt), {"role": "assistant", "content": []}, result]
    events = anthropic_events(post(server, body, path="/v1/messages").body)
    args = "".join(d["delta"].get("partial_json", "") for n, d in events if n == "content_block_delta")
    edit = {"file_path": "/work/here/a.txt", "old_string": "x", "new_string": "y"}
    assert json.loads(args) == edit


def test_script_that_is_no_list_of_calls_says_so(server: ScriptedModelServer) -> None:
    for prompt in ("not json", '{"bash": 1}', '[["bash"]]', '[["bash", "echo"]]'):
        chunks = openai_chunks(chat(server, "script", messages=[user(prompt)]).body)
        assert "".join(deltas(chunks, "content")) == SCRIPT_UNREADABLE
        assert tool_calls(chunks) == []
