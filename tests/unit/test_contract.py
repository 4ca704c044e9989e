"""The wire contract: the committed JSON Schema matches the code, and params are strict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.contract import RunParams, json_schema, pi_message_adapter

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "protocol.schema.json"


def test_committed_schema_matches_the_code() -> None:
    committed = json.loads(SCHEMA.read_text())
    assert committed == json.loads(json.dumps(json_schema())), (
        "docs/protocol.schema.json is stale: run `python -m bridge.contract > docs/protocol.schema.json`"
    )


def test_run_params_are_camel_case_and_strict() -> None:
    params = RunParams.model_validate(
        {"prompt": "x", "runId": "a.b:c-1", "liveThoughts": True, "deadlineMs": 5}
    )
    assert params.run_id == "a.b:c-1" and params.live_thoughts and params.deadline_ms == 5
    for bad in (
        {"prompt": ""},
        {"prompt": "x", "piCommand": ["sh"]},
        {"prompt": "x", "runId": "has space"},
        {"prompt": "x", "thinking": "extreme"},
        {"prompt": "x", "retry": {"maxAttempts": 11}},
        {"prompt": 5},
    ):
        with pytest.raises(ValidationError):
            RunParams.model_validate(bad)


def test_messages_forbid_extra_fields() -> None:
    message = {"runId": "r", "attempt": 1, "seq": 1, "type": "assistant", "content": {"text": "hi"}}
    pi_message_adapter().validate_python(message)
    with pytest.raises(ValidationError):
        pi_message_adapter().validate_python({**message, "content": {"text": "hi", "extra": 1}})


def test_redactor_masks_secret_values_in_errors() -> None:
    from bridge.policy.redact import MASK, Redactor

    redactor = Redactor({"OPENAI_API_KEY": "sk-test-0123456789", "HOME": "/home/someone", "TOKEN": "short"})
    error = {
        "kind": "auth",
        "message": "401 bad key sk-test-0123456789",
        "stderr": "key=sk-test-0123456789\n",
    }
    masked = redactor.error(error)
    assert "sk-test-0123456789" not in str(masked) and MASK in masked["message"]
    assert redactor.text("/home/someone short") == "/home/someone short", "only secret-named, long values"
