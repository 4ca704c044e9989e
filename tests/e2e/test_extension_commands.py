"""A prompt that a pi extension's command consumes ends at once: real pi 1.6.0 with a user
extension that registers `/hello`.

pi answers such a prompt `disposition: "handled"` and starts no run, so no `agent_settled`
follows; a bridge that waited for one would leave the prompt running until its silence timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from tests.conftest import requires_pi
from tests.support.env import agent_dir_with_extension
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, initialize, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

HELLO_COMMAND = """
export default function (pi) {
  pi.registerCommand("hello", {
    description: "say hello without the model",
    handler: async (args, ctx) => {
      ctx.ui.notify(`hello ${args}`, "info");
    },
  });
}
"""


@pytest.fixture
def command_agent_dir(pi_agent_dir: Path, tmp_path: Path) -> Path:
    return agent_dir_with_extension(pi_agent_dir, tmp_path / "pi-agent", "hello.ts", HELLO_COMMAND)


@pytest_lsp.fixture(config=bridge_config())
async def bridge(lsp_client: LanguageClient, command_agent_dir: Path) -> AsyncIterator[LanguageClient]:
    # A silence timeout far past the test's own wait: ending by silence would fail the test.
    env = {"PI_CODING_AGENT_DIR": str(command_agent_dir)}
    await initialize(lsp_client, {"env": env, "warmPool": False, "silenceTimeoutMs": 60000})
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


async def test_a_prompt_an_extension_command_handles_ends_at_once_and_the_conversation_goes_on(
    bridge: LanguageClient, tmp_path: Path
) -> None:
    params = {"prompt": "/hello there", "provider": "fake", "model": "text", "cwd": str(tmp_path)}
    with anyio.fail_after(20):
        handled = await request(bridge, "pi/run", params)
    assert handled["status"] == "completed", handled
    messages = messages_of(bridge).by_run[handled["runId"]]
    assert_stream_invariants(messages)
    assert not [m for m in messages if m["type"] == "text.delta"], "the model was not asked"
    follow = {**params, "prompt": "Say hello", "sessionId": handled["sessionId"]}
    with anyio.fail_after(20):
        after = await request(bridge, "pi/run", follow)
    assert after["status"] == "completed" and after["text"], after
