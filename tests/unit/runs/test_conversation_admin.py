"""The toolbox finds a conversation's agent, however it was picked: in-process, no agent started
(stand-ins for the live conversations; the e2e tests drive the real ones)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio

from bridge import agents
from bridge.agents.values import AgentOption, OptionChoice
from bridge.config import BridgeConfig
from bridge.runs.agent_choice import AgentChoice
from bridge.runs.conversation_admin import ConversationAdmin
from bridge.runs.registry import RunRegistry

PLAN = AgentOption(
    "mode", "Session Mode", "mode", "build", (OptionChoice("build", "build"), OptionChoice("plan", "plan"))
)


class _OwnOptionsClient:
    """A live client with options of its own (an ACP agent's), noting what it is asked to set."""

    def __init__(self) -> None:
        self.options = (PLAN,)
        self.set: list[tuple[str, str]] = []

    async def agent_options(self) -> tuple[AgentOption, ...]:
        return self.options

    async def set_agent_option(self, option_id: str, value: str) -> tuple[AgentOption, ...]:
        self.set.append((option_id, value))
        self.options = tuple(
            AgentOption(o.option_id, o.name, o.category, value, o.choices) for o in self.options
        )
        return self.options


def _conversations(live: dict[str, Any]) -> Any:
    """Live conversations holding `live` (session id -> live agent)."""
    return SimpleNamespace(slots=SimpleNamespace(live_agent=live.get))


def test_a_conversation_of_an_agent_picked_for_it_gets_its_own_agents_options() -> None:
    """A pi server's conversation picked for OpenCode: its options are OpenCode's, and setting one
    goes to OpenCode's live agent, not to a new conversation of the server's own agent."""
    choice = AgentChoice(agents.build_adapter("pi"), BridgeConfig())
    opencode = choice.adapter_named("opencode")
    choice.remember("ses_oc", "opencode")
    client = _OwnOptionsClient()
    picked = _conversations({"ses_oc": SimpleNamespace(alive=True, client=client)})
    own = _conversations({})

    async def no_new_conversation(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a conversation was opened instead of asking the live one")

    registry = SimpleNamespace(
        adapter=choice.adapter,
        agents=choice,
        conversations=own,
        attempts=SimpleNamespace(
            every_conversations=lambda: [own, picked],
            live_conversations=lambda adapter: picked if adapter is opencode else own,
        ),
        open_conversation=no_new_conversation,
    )
    admin = ConversationAdmin(cast(RunRegistry, registry))
    assert anyio.run(admin.agent_options, "ses_oc") == (PLAN,)
    assert anyio.run(admin.agent_options, "ses_other") == (), "a conversation that is not live has none"
    after = anyio.run(admin.set_agent_option, "ses_oc", "mode", "plan")
    assert client.set == [("mode", "plan")] and [o.current for o in after] == ["plan"]
