"""RunRequest, the fronts' one request type, carries every field of the pi/run wire model."""

from __future__ import annotations

import dataclasses

from bridge.contract import McpServerStdio, RetryPolicy, RunParams
from bridge.runs.request import RunRequest


def test_a_run_request_has_exactly_the_fields_of_pi_run() -> None:
    assert {field.name for field in dataclasses.fields(RunRequest)} == set(RunParams.model_fields)


def test_a_pi_run_becomes_a_run_request_field_for_field() -> None:
    params = RunParams.model_validate(
        {
            "prompt": "go",
            "runId": "r-1",
            "sessionId": "s1",
            "thinking": "high",
            "tools": ["read"],
            "retry": {"maxAttempts": 2},
            "deadlineMs": 5000,
            "agent": "pi",
            "mode": "plan",
            "mcpServers": [{"name": "m", "command": "srv"}],
        }
    )
    request = RunRequest.of(params)
    for name in RunParams.model_fields:
        assert getattr(request, name) == getattr(params, name), name
    assert request.retry == RetryPolicy(max_attempts=2)
    assert request.mcp_servers == [McpServerStdio(name="m", command="srv")]
    assert request.mode == "plan" and request.deadline_ms == 5000 and request.run_id == "r-1"
