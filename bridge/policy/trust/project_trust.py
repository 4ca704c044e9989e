"""Project trust: whether a run's agent may load the folder's own project files (its settings,
extensions, prompts, skills), asked of the user once per workspace.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import anyio.to_thread

from bridge import contract
from bridge.agents.seam import AgentAdapter, ProjectFiles, trust_roots
from bridge.agents.values import Out
from bridge.contract import PermissionMode, PermissionOption
from bridge.policy.approvals import ApprovalRequest, Approver, ask
from bridge.policy.run_view import RunView
from bridge.policy.trust.trust_store import (
    Fingerprint,
    TrustDecision,
    TrustStore,
    changes,
    fingerprint,
    merged,
    shown,
    within,
)

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


def question(agent: str, resources: tuple[str, ...], changed: list[str] | None = None) -> str:
    """The question as the user reads it, naming what the folder holds (and what changed in it
    since the user trusted it)."""
    if changed:
        return (
            f"This folder's {agent} settings/extensions changed since you trusted it "
            f"({shown(changed)}): trust it again? Trusting lets {agent} load "
            f"{', '.join(resources)}, and run the folder's extensions."
        )
    return (
        f"This folder has {agent} settings/extensions ({', '.join(resources)}): trust it? "
        f"Trusting lets {agent} load them, and run the folder's extensions."
    )


@dataclass(frozen=True, slots=True)
class Known:
    """The decision in force without asking (`trusted` None: none), and, when a trust no longer
    holds, what changed since it was given."""

    trusted: bool | None
    changed: tuple[str, ...] = ()


class ProjectTrust:
    """The trust decision of each workspace: saved ones, this bridge's ones, and the question."""

    def __init__(self, store: TrustStore) -> None:
        self.store = store
        #: resolved cwd -> "trust this time" (True) or "not now" (False), for this bridge's life,
        #: with the fingerprint of the config the user saw.
        self._this_bridge: dict[str, tuple[bool, Fingerprint]] = {}
        #: Workspaces whose untrusted files a notice has told of (once per bridge).
        self._told: set[str] = set()
        self._locks: dict[str, anyio.Lock] = {}

    def known(self, cwd: str, roots: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> Known:
        """The decision in force for `cwd` without asking, a trust holding only while the config
        under `roots` is as the user saw it; blocking I/O (a stat per config file). `roots` may be
        given as the function that finds them: a folder with no decision needs none."""
        return self._known(os.path.realpath(cwd), roots if callable(roots) else lambda: roots)

    def _known(self, resolved: str, roots_of: Callable[[], tuple[str, ...]]) -> Known:
        """`known` of a folder already resolved (each resolution is a stat per component)."""
        changed: list[str] = []
        saved = self.store.get_resolved(resolved)  # first: `pi-bridge trust` may have spoken since
        if saved is not None:
            decision, config = saved
            if decision == "untrusted":
                return Known(False)
            changed = _changed_since(config, roots_of(), resolved)
            if not changed:
                return Known(True)
        here = self._this_bridge.get(resolved)
        if here is not None:
            trusted, config = here
            if not trusted:
                return Known(False)
            here_changed = _changed_since(config, roots_of(), resolved)
            if not here_changed:
                return Known(True)
            changed = changed or here_changed
        return Known(None, tuple(changed))

    def trusted_now(self, cwd: str, agent: AgentAdapter, env: Mapping[str, str]) -> bool:
        """Whether `agent` started for `cwd` now (ahead of a prompt) may load its project files:
        a decision to trust that still holds. Blocking I/O."""
        return self.known(cwd, trust_roots(agent, cwd, env)).trusted is True

    async def decide(
        self, run: RunView, approver: Approver | None, mode: PermissionMode, env: Mapping[str, str]
    ) -> bool:
        """Whether `run`'s agent (started with `env`) may load the project files of its folder."""
        cwd = os.path.realpath(run.options.cwd)
        lock = self._locks.get(cwd)
        if lock is None:
            lock = self._locks[cwd] = anyio.Lock()
        if not await _acquired(lock, run):
            return False  # cancelled while another run of the folder had the question open
        try:
            return await self._decide(run, cwd, approver, mode, env)
        finally:
            lock.release()
            if not lock.statistics().tasks_waiting:
                self._locks.pop(cwd, None)

    async def _decide(
        self, run: RunView, cwd: str, approver: Approver | None, mode: PermissionMode, env: Mapping[str, str]
    ) -> bool:
        # What a decision covers, found only when one is in force or the question is put.
        roots_of = functools.cache(lambda: trust_roots(run.agent, cwd, env))

        def look() -> tuple[Known, tuple[str, ...]]:
            # On the loop: a few stats and one small file read, where a trip to a worker
            # thread is a wait on every prompt's path (the longest of its spans on a busy
            # machine, bench/suites/studies/trace_first_prompt.py); nearly always "nothing here".
            known = self._known(cwd, roots_of)
            if known.trusted is not None or not isinstance(run.agent, ProjectFiles):
                return known, ()
            return known, tuple(run.agent.project_resources(cwd, env))

        known, resources = look()
        if known.trusted is not None:
            return known.trusted
        if not resources:
            return False
        roots = roots_of()
        # What the user is asked about: a later change is one they did not see.
        seen = await anyio.to_thread.run_sync(fingerprint, roots, cwd)
        changed = list(known.changed)
        if mode == "full" or approver is None:
            why = "full mode" if mode == "full" else "no one to ask"
            if changed:
                why = f"its config changed since it was trusted: {shown(changed)}; {why}"
            self._tell_untrusted(run, cwd, resources, why)
            return False
        return await self._ask(run, cwd, resources, approver, _Seen(roots, seen, changed))

    async def _ask(
        self, run: RunView, cwd: str, resources: tuple[str, ...], approver: Approver, seen: _Seen
    ) -> bool:
        """Put the question to the user; exactly one permission.resolved follows it."""
        agent = run.agent.display_name
        changed = seen.changed
        request = ApprovalRequest(
            run_id=run.run_id,
            session_id=run.session_id or run.options.session_id,
            tool_call_id=f"trust-{uuid.uuid4().hex[:12]}",
            tool=TRUST_TOOL,
            kind="other",
            title=question(agent, resources, changed),
            input={"cwd": cwd, "resources": list(resources), **({"changed": changed} if changed else {})},
            diff=None,
            options=trust_options(),
            message=question(agent, resources, changed),
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
            await self._save(cwd, "trusted" if trusted else "untrusted", resources, seen)
        self._this_bridge[cwd] = (trusted, seen.config)
        log.info("project trust of %s: %s (%s)", cwd, option.option_id, ", ".join(resources))
        return trusted

    async def _save(self, cwd: str, decision: TrustDecision, resources: tuple[str, ...], seen: _Seen) -> None:
        """Save an "always" answer, with the config it covers (another agent's part of a saved
        fingerprint kept); a store that refuses it leaves this bridge's answer standing."""

        def save() -> None:
            saved = self.store.get_record(cwd)
            config = merged(saved[1] if saved is not None else None, seen.roots, cwd, seen.config)
            self.store.set(cwd, decision, resources, config)

        try:
            await anyio.to_thread.run_sync(save)
        except (OSError, ValueError) as exc:
            log.warning("the project-trust decision for %s was not saved: %s", cwd, exc)

    def _tell_untrusted(self, run: RunView, cwd: str, resources: tuple[str, ...], why: str) -> None:
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


@dataclass(frozen=True, slots=True)
class _Seen:
    """The config the question is about: the agent's trust roots, their fingerprint when the
    question was put, and what had changed since an earlier trust."""

    roots: tuple[str, ...]
    config: Fingerprint
    changed: list[str]


def _changed_since(config: Fingerprint | None, roots: tuple[str, ...], cwd: str) -> list[str]:
    """What changed under `roots` since `config` was taken; a decision with no fingerprint
    (saved by an older bridge) covers nothing."""
    if config is None:
        return ["the config it covered was not recorded (trusted by an older pi-bridge)"]
    before = within(config, roots, cwd)
    return changes(before, fingerprint(roots, cwd, before))


async def _acquired(lock: anyio.Lock, run: RunView) -> bool:
    """Take `lock`, unless the run is cancelled first (False). A free lock is taken at once,
    without a trip through the loop: this is on every prompt's path."""
    if run.cancel.cancelled:
        return False
    if not lock.locked():
        lock.acquire_nowait()
        return True
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
