"""What a run hands Codex besides its prompt: its images, as `turn/start` image inputs, judged from
the requests the scripted model's Responses API received. The bridge and its Codex home are
test_codex.py's.
"""

# ruff: noqa: F811 (test_codex.py's fixture, imported by name, is the tests' parameter)

from __future__ import annotations

import secrets
from pathlib import Path

from pytest_lsp import LanguageClient

from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.request_body import user_images_of
from tests.e2e.test_codex import bodies_of, bridge, live_pids, pytestmark, run  # noqa: F401
from tests.support.model_requests import PIXEL_PNG


async def test_an_image_reaches_the_model_with_the_prompt(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    tag = secrets.token_hex(4)
    images = [{"mimeType": "image/png", "data": PIXEL_PNG}]
    result, messages = await run(bridge, "echo", prompt=f"see-{tag}", cwd=str(tmp_path), images=images)
    assert result["status"] == "completed", messages[-1]["content"]
    assert result["text"] == f"ECHO:see-{tag}"
    assert await live_pids(bridge, result["sessionId"]), "the conversation's app-server took it"
    [body] = [b for b in bodies_of(scripted_model, "echo") if f"see-{tag}" in str(b)]
    assert user_images_of(body) == [f"data:image/png;base64,{PIXEL_PNG}"], "the image, as sent"
