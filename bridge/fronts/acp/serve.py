"""`pi-bridge acp`'s process: start-up order and shutdown."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from pydantic import BaseModel

from bridge import contract
from bridge.config import BridgeConfig
from bridge.fronts.acp.first_frame import FirstFrame
from bridge.fronts.acp.transport import StdioTransport
from bridge.fronts.lifecycle import Stop, serve_until_stopped
from bridge.policy.gate import Gate
from bridge.runs.registry import AgentAdapter, RunRegistry

if TYPE_CHECKING:
    from bridge.fronts.acp.agent import AcpAgent

log = logging.getLogger(__name__)


class _LateSink:
    """The registry's sink and backpressure hook, bound to the ACP agent once the SDK has loaded
    (no run starts before: runs start from prompts, which the agent serves)."""

    def __init__(self) -> None:
        self.agent: AcpAgent | None = None

    def __call__(self, payloads: list[dict[str, Any]]) -> None:
        if self.agent is not None:
            self.agent.on_messages(payloads)

    async def wait_writable(self) -> None:
        """Wait while the client is behind (see AcpAgent.wait_writable)."""
        if self.agent is not None:
            await self.agent.wait_writable()


def _load_front(registry: RunRegistry) -> Any:
    """The SDK and the ACP agent (worker thread: the event loop keeps serving pi meanwhile).

    What the first prompt would otherwise do is done here too, while pi boots: the wire
    contract's validators are built (its models defer that to first use, on the first
    prompt's path), and every agent's adapter (a session's first prompt asks each agent whether
    the session is its own, and building one imports its package)."""
    front = importlib.import_module("bridge.fronts.acp.agent")
    for model in vars(contract).values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == contract.__name__:
            model.model_rebuild()
    for name in registry.agents.agent_names():
        try:
            registry.agents.adapter_named(name)
        except Exception as exc:  # an agent that cannot be built is the prompt's to report
            log.info("agent %s not built ahead: %s", name, exc)
    return front


async def serve_acp(first: FirstFrame, adapter: AgentAdapter, config: BridgeConfig, default_cwd: str) -> int:
    """Serve ACP on this process's stdin/stdout until end of input or a signal; stop runs first."""
    sys.stdout = sys.stderr  # stdout belongs to the protocol: a stray print must not corrupt it
    sink = _LateSink()
    gate = Gate(config.default_mode or "full")
    registry = RunRegistry(adapter, config, sink, wait_writable=sink.wait_writable, gate=gate)
    agents: list[AcpAgent] = []
    stop = Stop()

    async def serve_front(tasks: anyio.abc.TaskGroup) -> None:
        front = await asyncio.to_thread(_load_front, registry)
        transport = await StdioTransport.open(first)
        agent = front.AcpAgent(registry, gate, default_cwd=default_cwd)
        if first.answered:  # the SDK never saw that initialize: what the client declared in it
            agent.client_declared(first.client_capabilities)
        sink.agent = agent
        agents.append(agent)
        tasks.start_soon(agent.pump)
        tasks.start_soon(registry.prepare_first_prompt)  # the SDK is loaded: off its start-up
        await front.connect(agent, transport).main_loop()
        stop.request("the ACP connection ended")

    def start_front(tasks: anyio.abc.TaskGroup) -> None:
        registry.prime_live(default_cwd)  # pi boots while the SDK loads
        tasks.start_soon(serve_front, tasks)

    async def finish_front() -> None:
        for agent in agents:
            with anyio.move_on_after(2.0):
                await agent.flush()
            await agent.close()

    await serve_until_stopped(
        registry,
        stop,
        name="pi-bridge acp",
        start_front=start_front,
        cancel_reason=lambda _why: "the ACP connection ended",
        finish_front=finish_front,
    )
    return 0


def run_acp(first: FirstFrame, adapter: AgentAdapter, config: BridgeConfig) -> int:
    """Serve ACP on stdio; returns the exit code."""
    return asyncio.run(serve_acp(first, adapter, config, os.getcwd()))
