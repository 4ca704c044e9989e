"""The scripted model's OpenAI Responses and Gemini APIs: every kind of scenario (text, thinking,
tool calls over several turns, `script`, errors, a cut stream, a slow stream) over raw HTTP, in
the shapes Codex and Gemini CLI send (the tool names and request layout they were seen to use)."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.scripted_model import (
    DROP_TEXT,
    EDIT_FILE,
    EDIT_NEW,
    EDIT_OLD,
    LENGTH_TEXT,
    TEXT_REPLY,
    THINKING_ANSWER,
    THINKING_THOUGHT,
    TOOL_COMMANDS,
    TOOL_PREAMBLE,
    WRITE_CONTENT,
    WRITE_FILE,
    ScriptedModelServer,
    tool_answer_text,
)
from bridge.scripted_model.scenarios import SCRIPT_PREAMBLE

TIMEOUT = 10.0
GEMINI_CONTEXT = "<session_context>\nThis is the Gemini CLI.\n</session_context>"


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(delay_scale=0.0) as srv:
        yield srv


def post(srv: ScriptedModelServer, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=TIMEOUT)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def sse(body: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name or None, data) of every SSE event of a body."""
    events = []
    for block in body.split(b"\n\n"):
        name, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data = json.loads(line[6:])
        if data is not None:
            events.append((name, data))
    return events


# ------------------------------------------------------------------------------------------------
# OpenAI Responses (Codex)

CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {"properties": {"cmd": {}, "workdir": {}}}},
    {"type": "function", "name": "view_image", "parameters": {"properties": {"path": {}}}},
    {"type": "web_search"},
]


def codex_body(model: str, prompt: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A request as Codex 0.171.0 sends it: instructions, developer and context messages, tools."""
    return {
        "model": model,
        "instructions": "You are Codex.",
        "stream": True,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context/>"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
            *(history or []),
        ],
        "tools": CODEX_TOOLS,
    }


class Responses:
    """A Responses stream, read back: the text, reasoning and function calls its items carried."""

    def __init__(self, body: bytes) -> None:
        self.events = sse(body)
        for name, data in self.events:
            assert data["type"] == name
        numbers = [data["sequence_number"] for _, data in self.events]
        assert numbers == list(range(len(numbers)))
        self.names = [name for name, _ in self.events]

    def deltas(self, name: str) -> str:
        return "".join(d["delta"] for n, d in self.events if n == name)

    def done_items(self) -> list[dict[str, Any]]:
        return [d["item"] for n, d in self.events if n == "response.output_item.done"]

    def calls(self) -> list[dict[str, Any]]:
        return [i for i in self.done_items() if i["type"] == "function_call"]

    def end(self) -> dict[str, Any]:
        name, data = self.events[-1]
        assert name in ("response.completed", "response.incomplete")
        return dict(data["response"])


def test_responses_text_streams_deltas_then_completes_with_usage_and_the_items(
    server: ScriptedModelServer,
) -> None:
    status, body = post(server, "/v1/responses", codex_body("text", "hi"))
    assert status == 200
    stream = Responses(body)
    assert stream.names[:2] == ["response.created", "response.in_progress"]
    assert stream.names.count("response.output_text.delta") > 10
    assert stream.deltas("response.output_text.delta") == TEXT_REPLY
    end = stream.end()
    assert end["status"] == "completed"
    assert end["output"] == stream.done_items()
    assert end["output"][0]["content"][0]["text"] == TEXT_REPLY
    assert end["usage"]["input_tokens"] > 0 and end["usage"]["output_tokens"] > 0
    assert end["usage"]["total_tokens"] == end["usage"]["input_tokens"] + end["usage"]["output_tokens"]


def test_responses_echo_answers_the_prompt_not_the_context(server: ScriptedModelServer) -> None:
    _, body = post(server, "/v1/responses", codex_body("echo", "Say hi ünïcode"))
    assert Responses(body).deltas("response.output_text.delta") == "ECHO:Say hi ünïcode"
    recorded = server.requests[-1]
    assert recorded["path"] == "/v1/responses"
    assert recorded["raw"]["instructions"] == "You are Codex."
    assert server.request_summaries()[-1]["userTexts"][-1] == "Say hi ünïcode"


def test_responses_thinking_is_a_reasoning_item_before_the_message(server: ScriptedModelServer) -> None:
    _, body = post(server, "/v1/responses", codex_body("thinking", "hi"))
    stream = Responses(body)
    assert stream.deltas("response.reasoning_summary_text.delta") == THINKING_THOUGHT
    assert [i["type"] for i in stream.done_items()] == ["reasoning", "message"]
    assert stream.done_items()[0]["summary"] == [{"type": "summary_text", "text": THINKING_THOUGHT}]
    assert stream.deltas("response.output_text.delta") == THINKING_ANSWER


@pytest.mark.parametrize("model", ["tool", "toolslow"])
def test_responses_tool_calls_codex_exec_command_then_answers_its_output(
    server: ScriptedModelServer, model: str
) -> None:
    _, body = post(server, "/v1/responses", codex_body(model, "go"))
    stream = Responses(body)
    assert stream.deltas("response.output_text.delta") == TOOL_PREAMBLE
    (call,) = stream.calls()
    assert call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": TOOL_COMMANDS[model]}
    assert stream.deltas("response.function_call_arguments.delta") == call["arguments"]
    assert stream.end()["status"] == "completed"

    history = [
        {
            "type": "function_call",
            "name": call["name"],
            "arguments": call["arguments"],
            "call_id": call["call_id"],
        },
        {"type": "function_call_output", "call_id": call["call_id"], "output": "hi\n"},
    ]
    _, body = post(server, "/v1/responses", codex_body(model, "go", history))
    answer = Responses(body)
    assert answer.calls() == []
    assert answer.deltas("response.output_text.delta") == tool_answer_text(model, "hi\n")


def test_responses_script_makes_each_call_in_turn_then_reports_every_result(
    server: ScriptedModelServer,
) -> None:
    script = json.dumps([["bash", {"command": "echo one"}], ["view_image", {"path": "a.png"}]])
    _, body = post(server, "/v1/responses", codex_body("script", script))
    stream = Responses(body)
    assert stream.deltas("response.output_text.delta") == SCRIPT_PREAMBLE
    (first,) = stream.calls()
    assert (first["name"], json.loads(first["arguments"])) == ("exec_command", {"cmd": "echo one"})
    history = [
        {"type": "function_call", "name": first["name"], "arguments": first["arguments"], "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "one"}]},
    ]
    _, body = post(server, "/v1/responses", codex_body("script", script, history))
    (second,) = Responses(body).calls()
    assert (second["name"], json.loads(second["arguments"])) == ("view_image", {"path": "a.png"})
    history += [
        {"type": "function_call", "name": "view_image", "arguments": second["arguments"], "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c2", "output": "an image"},
    ]
    _, body = post(server, "/v1/responses", codex_body("script", script, history))
    assert (
        Responses(body).deltas("response.output_text.delta")
        == "The tools said:\n[1] one\n[2] an image\nDone."
    )


def test_responses_length_ends_incomplete_and_drop_ends_without_a_completion(
    server: ScriptedModelServer,
) -> None:
    _, body = post(server, "/v1/responses", codex_body("length", "hi"))
    assert Responses(body).deltas("response.output_text.delta") == LENGTH_TEXT
    end = Responses(body).end()
    assert end["status"] == "incomplete"
    assert end["incomplete_details"] == {"reason": "max_output_tokens"}
    _, body = post(server, "/v1/responses", codex_body("drop", "hi"))
    stream = Responses(body)
    assert stream.deltas("response.output_text.delta") == DROP_TEXT
    assert not {"response.completed", "response.incomplete", "response.output_item.done"} & set(stream.names)


def test_responses_errors_are_openai_error_bodies_and_flaky_recovers(server: ScriptedModelServer) -> None:
    status, body = post(server, "/v1/responses", codex_body("err429", "hi"))
    assert status == 429
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"
    statuses = [post(server, "/v1/responses", codex_body("flaky", "hi"))[0] for _ in range(3)]
    assert statuses == [500, 500, 200]


# ------------------------------------------------------------------------------------------------
# Gemini (Gemini CLI)

GEMINI_TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "run_shell_command",
                "parametersJsonSchema": {"properties": {"command": {}, "description": {}}},
            },
            {"name": "write_file", "parametersJsonSchema": {"properties": {"file_path": {}, "content": {}}}},
        ]
    }
]


def gemini_body(prompt: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A request as Gemini CLI 0.61.0 sends it: its session context and the prompt as two parts
    of one user content, the system instruction, the function declarations."""
    return {
        "contents": [
            {"role": "user", "parts": [{"text": GEMINI_CONTEXT}, {"text": prompt}]},
            *(history or []),
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
        "tools": GEMINI_TOOLS,
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
    }


def gemini_path(model: str, method: str = "streamGenerateContent") -> str:
    return f"/v1beta/models/{model}:{method}?alt=sse"


def gemini_parts(body: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every part of a Gemini stream, and its chunks."""
    chunks = [data for name, data in sse(body) if name is None]
    parts = [part for c in chunks for part in c["candidates"][0]["content"]["parts"]]
    return parts, chunks


def text_of(parts: list[dict[str, Any]], thought: bool = False) -> str:
    return "".join(p["text"] for p in parts if "text" in p and bool(p.get("thought")) == thought)


def test_gemini_text_streams_parts_and_the_last_chunk_finishes_with_usage(
    server: ScriptedModelServer,
) -> None:
    status, body = post(server, gemini_path("text"), gemini_body("hi"))
    assert status == 200
    parts, chunks = gemini_parts(body)
    assert len(chunks) > 10
    assert text_of(parts) == TEXT_REPLY
    assert [c["candidates"][0].get("finishReason") for c in chunks][-2:] == [None, "STOP"]
    usage = chunks[-1]["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert server.requests[-1]["model"] == "text"


def test_gemini_echo_answers_the_prompt_without_the_session_context(server: ScriptedModelServer) -> None:
    _, body = post(server, gemini_path("echo"), gemini_body("Say hi"))
    assert text_of(gemini_parts(body)[0]) == "ECHO:Say hi"
    assert server.requests[-1]["raw"]["contents"][0]["parts"][0]["text"] == GEMINI_CONTEXT


def test_gemini_thinking_parts_are_thoughts(server: ScriptedModelServer) -> None:
    _, body = post(server, gemini_path("thinking"), gemini_body("hi"))
    parts, _ = gemini_parts(body)
    assert text_of(parts, thought=True) == THINKING_THOUGHT
    assert text_of(parts) == THINKING_ANSWER


@pytest.mark.parametrize("model", ["tool", "toolslow"])
def test_gemini_tool_calls_run_shell_command_whole_then_answers_its_output(
    server: ScriptedModelServer, model: str
) -> None:
    _, body = post(server, gemini_path(model), gemini_body("go"))
    parts, chunks = gemini_parts(body)
    assert text_of(parts) == TOOL_PREAMBLE
    calls = [p["functionCall"] for p in parts if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("run_shell_command", {"command": TOOL_COMMANDS[model]})
    ]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    history = [
        {"role": "model", "parts": [{"functionCall": calls[0]}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": calls[0]["name"], "response": {"output": "hi"}}}],
        },
    ]
    _, body = post(server, gemini_path(model), gemini_body("go", history))
    parts, _ = gemini_parts(body)
    assert not [p for p in parts if "functionCall" in p]
    assert text_of(parts) == tool_answer_text(model, "hi")


def test_gemini_script_calls_the_offered_tools_one_by_one(server: ScriptedModelServer) -> None:
    script = json.dumps(
        [["bash", {"command": "echo one"}], ["write_file", {"file_path": "a.txt", "content": "x"}]]
    )
    _, body = post(server, gemini_path("script"), gemini_body(script))
    first = [p["functionCall"] for p in gemini_parts(body)[0] if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in first] == [("run_shell_command", {"command": "echo one"})]
    history = [
        {"role": "model", "parts": [{"functionCall": first[0]}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "one"}}}],
        },
    ]
    _, body = post(server, gemini_path("script"), gemini_body(script, history))
    second = [p["functionCall"] for p in gemini_parts(body)[0] if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in second] == [
        ("write_file", {"file_path": "a.txt", "content": "x"})
    ]


def test_gemini_generate_content_answers_whole_and_count_tokens_estimates(
    server: ScriptedModelServer,
) -> None:
    status, body = post(server, gemini_path("text", "generateContent"), gemini_body("hi"))
    assert status == 200
    answer = json.loads(body)
    assert answer["candidates"][0]["content"]["parts"] == [{"text": TEXT_REPLY}]
    assert answer["candidates"][0]["finishReason"] == "STOP"
    status, body = post(server, gemini_path("text", "countTokens"), gemini_body("hi"))
    assert status == 200 and json.loads(body)["totalTokens"] > 0


def test_gemini_errors_are_google_error_bodies_and_length_is_max_tokens(server: ScriptedModelServer) -> None:
    status, body = post(server, gemini_path("err500"), gemini_body("hi"))
    assert status == 500
    assert json.loads(body)["error"] == {
        "code": 500,
        "message": "fake internal server error",
        "status": "INTERNAL",
    }
    _, body = post(server, gemini_path("nosuchmodel"), gemini_body("hi"))
    assert json.loads(body)["error"]["status"] == "NOT_FOUND"
    _, body = post(server, gemini_path("length"), gemini_body("hi"))
    assert gemini_parts(body)[1][-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    _, body = post(server, gemini_path("drop"), gemini_body("hi"))
    parts, chunks = gemini_parts(body)
    assert text_of(parts) == DROP_TEXT
    assert all("finishReason" not in c["candidates"][0] for c in chunks)


@pytest.mark.parametrize("api", ["responses", "gemini"])
def test_slow_streams_live_on_both_apis(api: str) -> None:
    """`slow` keeps its real-time pace whatever the delay scale: its first text arrives while the
    stream is still open (what a cancel test needs)."""
    with ScriptedModelServer(delay_scale=0.0) as srv:
        if api == "responses":
            path, body = "/v1/responses", codex_body("slow", "hi")
            marker = b"response.output_text.delta"
        else:
            path, body = gemini_path("slow"), gemini_body("hi")
            marker = b'"text":'
        with socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT) as conn:
            payload = json.dumps(body).encode()
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            conn.sendall(head.encode() + payload)
            received = b""
            while marker not in received:
                chunk = conn.recv(65536)
                assert chunk, "the stream closed before its first text"
                received += chunk
            assert b"response.completed" not in received and b"finishReason" not in received


@pytest.mark.parametrize(
    ("model", "call"),
    [
        ("write", ("write_file", {"file_path": WRITE_FILE, "content": WRITE_CONTENT})),
        ("edit", ("replace", {"file_path": EDIT_FILE, "old_string": EDIT_OLD, "new_string": EDIT_NEW})),
    ],
)
def test_gemini_file_scenarios_call_gemini_clis_own_file_tools(
    server: ScriptedModelServer, model: str, call: tuple[str, dict[str, Any]]
) -> None:
    body = gemini_body("go")
    body["tools"] = [
        {
            "functionDeclarations": [
                {
                    "name": "write_file",
                    "parametersJsonSchema": {"properties": {"file_path": {}, "content": {}}},
                },
                {
                    "name": "replace",
                    "parametersJsonSchema": {
                        "properties": {"file_path": {}, "old_string": {}, "new_string": {}}
                    },
                },
            ]
        }
    ]
    _, answer = post(server, gemini_path(model), body)
    calls = [p["functionCall"] for p in gemini_parts(answer)[0] if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in calls] == [call]


def test_opencode_file_scenario_calls_its_write_with_file_path_in_camel_case(
    server: ScriptedModelServer,
) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "write", "parameters": {"properties": {"filePath": {}, "content": {}}}},
        },
        {"type": "function", "function": {"name": "bash", "parameters": {"properties": {"command": {}}}}},
    ]
    body = {"model": "write", "stream": True, "messages": [{"role": "user", "content": "go"}], "tools": tools}
    _, answer = post(server, "/v1/chat/completions", body)
    chunks = [data for _, data in sse(answer.replace(b"data: [DONE]", b"")) if data.get("choices")]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "write"
    arguments = json.loads("".join(tc["function"]["arguments"] for tc in calls))
    assert arguments == {"filePath": WRITE_FILE, "content": WRITE_CONTENT}
