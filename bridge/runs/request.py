"""What a front asks of a run, whichever protocol the prompt came in by (pi/run, session/prompt)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bridge.contract import (
    McpServerHttp,
    McpServerStdio,
    PermissionMode,
    PromptImage,
    RetryPolicy,
    RunParams,
    SandboxSettings,
    ThinkingLevel,
)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A prompt to run and how: the fronts' one request type (unset fields take the defaults)."""

    prompt: str
    run_id: str | None = None
    cwd: str | None = None
    provider: str | None = None
    model: str | None = None
    thinking: ThinkingLevel | None = None
    tools: list[str] | None = None
    session_id: str | None = None
    continue_session: bool = False
    retry: RetryPolicy | None = None
    live_thoughts: bool = False
    deadline_ms: int | None = None
    #: Which agent runs the prompt (default: the session's agent, else the configured one).
    agent: str | None = None
    images: list[PromptImage] | None = None
    #: The conversation's permission mode from this run's next tool call on.
    mode: PermissionMode | None = None
    mcp_servers: list[McpServerStdio | McpServerHttp] | None = None
    sandbox: SandboxSettings | None = None

    @classmethod
    def of(cls, params: RunParams) -> RunRequest:
        """A `pi/run`'s params (validated already) as a run request."""
        return cls(**{field.name: getattr(params, field.name) for field in dataclasses.fields(cls)})
