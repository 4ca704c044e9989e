"""A bug in the bridge's handling of one run's output fails that run, never the others.

No input makes the mapper raise (tests/fuzz tries hard), so the bug is put in: pi's mapper that
raises on the run's third text delta. Everything else is real: the attempts, the conversation
registry, and the fake pis as the agent processes.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bridge.agents.pi import PiAgent
from bridge.agents.pi.mapper import PiEventMapper
from bridge.agents.values import Out, RunOptions
from bridge.engines.attempt import AttemptContext
from bridge.engines.cancel import CancelToken
from bridge.engines.endings import AttemptLimits, AttemptOutcome
from bridge.engines.live.conversations import Conversations
from bridge.engines.live.live_attempt import LiveAttempt, LiveHooks
from bridge.engines.one_process import ProcessAttempt
from tests.support.env import ROOT, fake_pi_command
from tests.support.leaks import run_processes_alive

pytestmark = pytest.mark.anyio

FAKE_RPC_PI = (sys.executable, str(ROOT / "tests" / "fakes" / "fake_rpc_pi.py"))
WAIT = 30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class BrokenMapper(PiEventMapper):
    """pi's mapper with a bug: it raises on the run's third text delta."""

    deltas = 0

    def feed(self, line: bytes) -> list[Out]:
        if b'"text_delta"' in line:
            self.deltas += 1
            if self.deltas == 3:
                raise RuntimeError("a bug in the mapper")
        return super().feed(line)


class BrokenPi(PiAgent):
    def new_mapper(self, options: RunOptions) -> PiEventMapper:
        return BrokenMapper(options)


def assert_failed_inside(outcome: AttemptOutcome, sent: list[Out]) -> None:
    """The attempt failed `internal` with exactly one terminal, last; what came before is there."""
    assert outcome.status == "failed" and outcome.error is not None, outcome
    assert outcome.error.kind == "internal" and "a bug in the mapper" in outcome.error.message
    terminals = [out for out in sent if out.type.startswith("terminal.")]
    assert len(terminals) == 1 and sent[-1] is terminals[0] and sent[-1].type == "terminal.failed"
    text = "".join(out.content["text"] for out in sent if out.type == "assistant")
    assert text == terminals[0].content["text"] == "word0 word1 "  # the deltas before the bug


async def test_a_bug_in_mapping_fails_the_json_attempt_and_stops_its_process(tmp_path: Path) -> None:
    sent: list[Out] = []
    attempt = ProcessAttempt(
        AttemptContext(
            BrokenPi(),
            tuple(fake_pi_command()),
            RunOptions(prompt="hi", cwd=str(tmp_path), model="slow"),
            sent.extend,
            CancelToken(),
            AttemptLimits(),
        )
    )
    with anyio.fail_after(WAIT):
        outcome = await attempt.run()
    assert_failed_inside(outcome, sent)
    assert outcome.shutdown is not None and outcome.shutdown.survivors == []
    assert run_processes_alive(outcome.shutdown.pids) == []


@asynccontextmanager
async def serving() -> AsyncIterator[Conversations]:
    """A conversation registry serving, as the bridge runs it."""
    conversations = Conversations(PiAgent())
    async with anyio.create_task_group() as tasks:
        await tasks.start(conversations.serve)
        yield conversations
        await conversations.close()
        tasks.cancel_scope.cancel()


async def rpc_attempt(
    conversations: Conversations, adapter: PiAgent, model: str, cwd: Path
) -> tuple[AttemptOutcome, list[Out]]:
    cwd.mkdir(exist_ok=True)
    lease = await conversations.slots.lease(None, CancelToken(), lambda: None)
    assert lease is not None
    sent: list[Out] = []
    attempt = LiveAttempt(
        conversations,
        lease,
        AttemptContext(
            adapter,
            FAKE_RPC_PI,
            RunOptions(prompt="hi", cwd=str(cwd), model=model),
            sent.extend,
            CancelToken(),
            AttemptLimits(),
        ),
        LiveHooks(),
    )
    try:
        with anyio.fail_after(WAIT):
            return await attempt.run(), sent
    finally:
        conversations.slots.release(lease)


async def test_a_bug_in_mapping_fails_the_rpc_attempt_only(tmp_path: Path) -> None:
    async with serving() as registry:
        outcome, sent = await rpc_attempt(registry, BrokenPi(), "slow", tmp_path)
        assert_failed_inside(outcome, sent)
        # pi itself was fine: its run was aborted, as a cancel aborts it, and it settled.
        assert outcome.shutdown is not None and outcome.shutdown.agent_kept is True, outcome.shutdown
        assert outcome.shutdown.survivors == []
        after, messages = await rpc_attempt(registry, PiAgent(), "text", tmp_path / "other")
        assert after.status == "completed" and after.text == "Hello from the fake rpc pi.", messages


async def test_a_bug_in_a_live_pi_s_reader_stops_that_pi_only(tmp_path: Path) -> None:
    """Below the attempt's own guard: whatever escapes one pi's reader ends that pi, not the registry."""
    async with serving() as registry:
        await reader_fails_then_another_conversation_runs(registry, tmp_path)


async def reader_fails_then_another_conversation_runs(registry: Conversations, tmp_path: Path) -> None:
    lease = await registry.slots.lease(None, CancelToken(), lambda: None)
    assert lease is not None
    agent = await registry.checkout(
        FAKE_RPC_PI, RunOptions(prompt="", cwd=str(tmp_path)), {}, lease, retrying=False
    )

    def broken_listener(lines: list[bytes]) -> None:
        raise RuntimeError("a bug in a listener")

    agent.client.listener = broken_listener
    await agent.client.delivered(agent.client.send_prompt_now("hi"))
    with anyio.fail_after(WAIT):
        await agent.client.closed.wait()
        while agent.stopped is None:
            await anyio.sleep(0.01)
    registry.slots.release(lease)
    assert not agent.alive and agent.stopped.survivors == []
    after, messages = await rpc_attempt(registry, PiAgent(), "text", tmp_path / "other")
    assert after.status == "completed", messages
