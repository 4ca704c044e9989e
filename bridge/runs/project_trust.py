"""Project trust: whether a run's agent may load the folder's own project files (its settings,
extensions, prompts, skills), asked of the user once per workspace.

A folder can carry code the agent runs at start-up (an extension), so it is never trusted
silently. Before a run's first attempt:
1. a decision the user made already applies: "trust this folder" / "never" (saved in the bridge's
   state dir, trust_store.py), "trust this time" / "not now" (kept for this bridge's life);
2. a folder with nothing the agent would load needs none (the agent is told "not trusted");
3. otherwise the user is asked through the front's approver, as a tool call is, and the stream
   shows the question as `permission.requested` and its one `permission.resolved`;
4. in `full` mode or when the client cannot answer, the folder is not trusted and a notice says
   why and how to trust it. No answer (a cancel, an answer that is none of the options) leaves it
   untrusted for this run, and the next run asks again.
Concurrent first runs of one workspace share one question.
"""

from __future__ import annotations

import logging
import os
import shlex
import uuid
from collections.abc import Mapping
from typing import Any, Final, Literal

import anyio
import anyio.to_thread

from bridge import contract
from bridge.agents.seam import Out
from bridge.contract import PermissionMode, PermissionOption
from bridge.runs.approvals import ApprovalRequest, Approver, ask
from bridge.runs.run import Run
from bridge.runs.trust_store import TrustDecision, TrustStore

log = logging.getLogger(__name__)

#: The name the question goes by where a tool call's name would be.
TRUST_TOOL: Final = "projectTrust"
TRUST_ALWAYS: Final = "trust-always"
TRUST_ONCE: Final = "trust-once"
NOT_NOW: Final = "not-now"
NEVER: Final = "never"
#: What `pi-bridge trust` is, for the notice of a client that cannot answer.
TRUST_COMMAND: Final = "pi-bridge trust"


def trust_options() -> tuple[PermissionOption, ...]:
    """The answers to the trust question (the approval channel's four kinds)."""
    return (
        PermissionOption(option_id=TRUST_ALWAYS, kind="allow_always", name="Trust this folder"),
        PermissionOption(option_id=TRUST_ONCE, kind="allow_once", name="Trust it this time"),
        PermissionOption(option_id=NOT_NOW, kind="reject_once", name="Not now"),
        PermissionOption(option_id=NEVER, kind="reject_always", name="Never trust this folder"),
    )


def question(agent: str, resources: tuple[str, ...]) -> str:
    """The question as the user reads it, naming what the folder holds."""
    return (
        f"This folder has {agent} settings/extensions ({', '.join(resources)}): trust it? "
        f"Trusting lets {agent} load them, and run the folder's extensions."
    )


class ProjectTrust:
    """The trust decision of each workspace: saved ones, this bridge's ones, and the question."""

    def __init__(self, store: TrustStore) -> None:
        self.store = store
        #: resolved cwd -> "trust this time" (True) or "not now" (False), for this bridge's life.
        self._this_bridge: dict[str, bool] = {}
        #: Workspaces whose untrusted files a notice has told of (once per bridge).
        self._told: set[str] = set()
        self._locks: dict[str, anyio.Lock] = {}

    def known(self, cwd: str) -> bool | None:
        """The decision in force for `cwd` without asking (None: none yet); blocking I/O."""
        resolved = os.path.realpath(cwd)
        saved = self.store.get(resolved)  # first: `pi-bridge trust` may have spoken since
        if saved is not None:
            return saved == "trusted"
        return self._this_bridge.get(resolved)

    def trusted_now(self, cwd: str) -> bool:
        """Whether an agent started for `cwd` now (ahead of a prompt) may load its project files."""
        return self.known(cwd) is True

    async def decide(
        self, run: Run, approver: Approver | None, mode: PermissionMode, env: Mapping[str, str]
    ) -> bool:
        """Whether `run`'s agent (started with `env`) may load the project files of its folder."""
        cwd = os.path.realpath(run.options.cwd)
        lock = self._locks.setdefault(cwd, anyio.Lock())
        if not await _acquired(lock, run):
            return False  # cancelled while another run of the folder had the question open
        try:
            return await self._decide(run, cwd, approver, mode, env)
        finally:
            lock.release()
            if not lock.statistics().tasks_waiting:
                self._locks.pop(cwd, None)

    async def _decide(
        self, run: Run, cwd: str, approver: Approver | None, mode: PermissionMode, env: Mapping[str, str]
    ) -> bool:
        known = await anyio.to_thread.run_sync(self.known, cwd)
        if known is not None:
            return known
        resources = await anyio.to_thread.run_sync(run.agent.project_resources, cwd, env)
        if not resources:
            return False
        if mode == "full" or approver is None:
            self._tell_untrusted(run, cwd, resources, "full mode" if mode == "full" else "no one to ask")
            return False
        return await self._ask(run, cwd, resources, approver)

    async def _ask(self, run: Run, cwd: str, resources: tuple[str, ...], approver: Approver) -> bool:
        """Put the question to the user; exactly one permission.resolved follows it."""
        agent = run.agent.display_name
        request = ApprovalRequest(
            run_id=run.run_id,
            session_id=run.session_id or run.options.session_id,
            tool_call_id=f"trust-{uuid.uuid4().hex[:12]}",
            tool=TRUST_TOOL,
            kind="other",
            title=question(agent, resources),
            input={"cwd": cwd, "resources": list(resources)},
            diff=None,
            options=trust_options(),
            message=question(agent, resources),
        )
        requested = contract.PermissionRequestedContent(
            tool_call_id=request.tool_call_id,
            tool=TRUST_TOOL,
            title=request.title,
            options=list(request.options),
        )
        run.emit([Out("permission.requested", _wire(requested))])
        option = None
        try:
            option = request.option((await ask(approver, request, run.cancel)).option_id)
        finally:
            decision: Literal["allow", "reject", "cancelled"] = (
                "cancelled" if option is None else "allow" if option.kind.startswith("allow") else "reject"
            )
            resolved = contract.PermissionResolvedContent(
                tool_call_id=request.tool_call_id,
                decision=decision,
                by="user",
                option_id=option.option_id if option else None,
            )
            run.emit([Out("permission.resolved", _wire(resolved))])
        if option is None:
            if not run.cancel.cancelled:
                shown = ", ".join(resources)
                text = f"no answer to the project-trust question: {shown} not loaded for this prompt"
                run.emit([Out("notice", {"level": "warning", "text": text})])
            return False
        trusted = option.kind.startswith("allow")
        if option.kind.endswith("always"):
            await self._save(cwd, "trusted" if trusted else "untrusted", resources)
        self._this_bridge[cwd] = trusted
        log.info("project trust of %s: %s (%s)", cwd, option.option_id, ", ".join(resources))
        return trusted

    async def _save(self, cwd: str, decision: TrustDecision, resources: tuple[str, ...]) -> None:
        """Save an "always" answer; a store that refuses it leaves this bridge's answer standing."""
        try:
            await anyio.to_thread.run_sync(self.store.set, cwd, decision, resources)
        except (OSError, ValueError) as exc:
            log.warning("the project-trust decision for %s was not saved: %s", cwd, exc)

    def _tell_untrusted(self, run: Run, cwd: str, resources: tuple[str, ...], why: str) -> None:
        """The notice of a folder left untrusted without asking (once per workspace and bridge)."""
        if cwd in self._told:
            return
        self._told.add(cwd)
        text = (
            f"this folder's {', '.join(resources)} are not loaded: the folder is not trusted ({why}). "
            f"To trust it, answer the trust question in a client that asks (not in full mode), "
            f"or run `{TRUST_COMMAND} {shlex.quote(cwd)}`."
        )
        run.emit([Out("notice", {"level": "warning", "text": text})])


async def _acquired(lock: anyio.Lock, run: Run) -> bool:
    """Take `lock`, unless the run is cancelled first (False)."""
    if run.cancel.cancelled:
        return False
    with anyio.CancelScope() as scope:
        take_back = run.cancel.on_cancel(scope.cancel)
        try:
            await lock.acquire()
            return True
        finally:
            take_back()
    return False


def _wire(content: contract.WireModel) -> dict[str, Any]:
    return content.model_dump(mode="json", by_alias=True, exclude_none=True)
