"""The permission gate of every conversation: its mode, the file the agent reads it from, and the
check that decides each tool call the agent asks about.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from bridge import contract
from bridge.agents.values import GATE_DIR_ENV, AskDialog, AskTool, DoFileOp, Out, ToolCheck, ToolVerdict
from bridge.contract import PermissionMode, PermissionOption, PermissionRule
from bridge.editor.editor_commands import Confine
from bridge.editor.editor_files import EditorFiles
from bridge.policy.approvals import (
    MAX_DIFF_BYTES,
    ApprovalRequest,
    Approver,
    ask,
    options_for,
    proposed_diff,
    title_of,
)
from bridge.policy.file_access import FileAccess, Refused
from bridge.policy.file_ops import file_access, file_ops
from bridge.policy.permissions import DecidedBy, ToolCall, decide
from bridge.policy.questions import Questioner, dialogs_for
from bridge.policy.redact import scrubbed_names
from bridge.policy.rule_store import RuleStore, RuleStoreError, state_dir
from bridge.policy.run_view import RunView
from bridge.policy.sandbox import SANDBOXES_DIR, SandboxBoard, file_stamp
from bridge.policy.trust.project_trust import ProjectTrust
from bridge.policy.trust.trust_store import TrustStore

log = logging.getLogger(__name__)

MODES_DIR: Final = "modes"
#: On the board when the editor runs the agent's commands in its own terminals: only then does the
#: agent's shell tool hand its command to the bridge (a dot: never a session id's file).
EDITOR_TERMINAL_MARK: Final = ".editor-terminal"
#: A session id the board names a file by (anything else is never a file: the agent then asks).
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


def unconfined_command(command: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The argv of an unsandboxed command in the editor's terminal: without the variables pi's
    own bash never gets (the client's secrets and all but a command's basics, redact.py). The
    editor's terminal starts from the editor's environment, the one the bridge was given too, so
    its names are the ones to take out."""
    unset = tuple(f"--unset={name}" for name in scrubbed_names(environ))
    return ("env", *unset, "bash", "-c", command)


class ModeBoard:
    """One directory of this bridge process, a file per conversation bound to a run."""

    def __init__(self, root: Path) -> None:
        #: The directory, unique to this bridge process; made (0700) with its first file.
        self.path = root / f"{os.getpid()}-{os.urandom(6).hex()}"
        self._made = False
        self._marks: set[str] = set()
        #: What each conversation's file holds, and the file's stamp once written.
        self._written: dict[str, tuple[str, tuple[int, int, int] | None]] = {}

    def publish(self, session_id: str, mode: PermissionMode | Literal["hold"]) -> None:
        """Write `mode` for `session_id` whole (temp file, then rename), `full` too: the agent
        reads a missing or unreadable file as `ask`, so deleting it never turns asking off.
        A file that holds `mode` already (the one written, untouched since) is left as it is:
        each prompt binds its conversation, and a write on the prompt's path waits on the disk."""
        if not _SAFE_NAME.fullmatch(session_id):
            return
        target = self.path / session_id
        if self._written.get(session_id) == (mode, file_stamp(target)):
            return
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._made = True
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=".mode-")
        with os.fdopen(fd, "w") as handle:
            handle.write(mode)
        os.replace(temp, target)
        self._written[session_id] = (mode, file_stamp(target))

    def mark(self, name: str) -> None:
        """An empty file `name` on the board (a fact of the whole bridge, such as
        EDITOR_TERMINAL_MARK), made once."""
        if name in self._marks:
            return
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._made = True
        (self.path / name).touch(mode=0o600)
        self._marks.add(name)

    def remove(self) -> None:
        """Remove the directory (the bridge is done)."""
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            self._made = False
            self._written.clear()
            self._marks.clear()


class FrontPolicy(Protocol):
    """What a front does to policy: attach its client's surfaces, set and read the modes, the rules."""

    default_mode: PermissionMode
    rules: RuleStore

    def attach_client(
        self, approver: Approver | None, questioner: Questioner | None, editor: EditorFiles | None
    ) -> None:
        """How the front's client is asked, and the editor that holds the agent's files."""
        ...

    def set_mode(self, session_id: str, mode: PermissionMode) -> None:
        """The conversation's mode from its next tool call on."""
        ...

    def mode_of(self, session_id: str | None) -> PermissionMode:
        """The mode of a conversation now."""
        ...


class Gate:
    """Every conversation's mode, and the permission check each run's tool calls go through."""

    def __init__(self, default_mode: PermissionMode = "full", root: Path | None = None) -> None:
        base = root if root is not None else state_dir(os.environ)
        self.base = base
        self.default_mode: PermissionMode = default_mode
        self.rules = RuleStore(base)
        self.board = ModeBoard(base / MODES_DIR)
        # Whether each workspace's project files may load, asked of the user once (project_trust.py).
        self.trust = ProjectTrust(TrustStore(base))
        #: Each conversation's sandbox, read by the same extension (sandbox.py).
        self.sandboxes = SandboxBoard(base / SANDBOXES_DIR)
        self._modes: dict[str, PermissionMode] = {}
        #: Conversations whose workspace has a deny rule: in `full` their agent still asks the gate
        #: (the agent's own `full` fast path would skip the rule).
        self._guarded: set[str] = set()
        #: How the front asks the user (None: it cannot, and a call that would ask is refused).
        self.approver: Approver | None = None
        #: How the front puts the agent's own dialogs to the user (None: each is cancelled at once).
        self.questioner: Questioner | None = None
        #: The front's editor, which reads and writes the agent's files itself (None: the disk).
        self.editor: EditorFiles | None = None

    def attach_client(
        self, approver: Approver | None, questioner: Questioner | None, editor: EditorFiles | None
    ) -> None:
        """How the front's client is asked, and the editor that holds the agent's files."""
        self.approver, self.questioner, self.editor = approver, questioner, editor

    def agent_env(self) -> dict[str, str]:
        """The environment that tells the agent's gate where the modes are."""
        return {GATE_DIR_ENV: str(self.board.path), **self.sandboxes.agent_env()}

    def mode_of(self, session_id: str | None) -> PermissionMode:
        """The mode of a conversation now."""
        if session_id is None:
            return self.default_mode
        return self._modes.get(session_id, self.default_mode)

    def set_mode(self, session_id: str, mode: PermissionMode) -> None:
        """The conversation's mode from its next tool call on."""
        self._modes[session_id] = mode
        self.board.publish(session_id, self._shown(session_id))

    def bind(
        self, session_id: str, mode: PermissionMode | None, *, hold: bool = False, cwd: str | None = None
    ) -> None:
        """A run streams on conversation `session_id`: its `mode` (if it gave one) is the
        conversation's now, and the agent's gate sees the conversation's mode. With `hold`, a
        `full` conversation's agent asks before each tool all the same, until `unhold`: the
        run's checkpoint is being taken, and no tool may change a file before it is. So it does
        while the run's workspace `cwd` has a deny rule: a deny rule holds in every mode."""
        if mode is not None:
            self._modes[session_id] = mode
        if cwd is not None:
            self._guard(session_id, cwd)
        shown = self._shown(session_id)
        self.board.publish(session_id, "hold" if hold and shown == "full" else shown)
        if self.editor is not None and self.editor.runs_commands():
            self.board.mark(EDITOR_TERMINAL_MARK)

    def unhold(self, session_id: str | None) -> None:
        """The conversation's checkpoint is taken: its agent's gate sees its mode again."""
        if session_id is not None:
            self.board.publish(session_id, self._shown(session_id))

    def _shown(self, session_id: str) -> PermissionMode | Literal["hold"]:
        """The mode the agent's gate sees: `hold` for a `full` conversation under a deny rule."""
        mode = self.mode_of(session_id)
        return "hold" if mode == "full" and session_id in self._guarded else mode

    def _guard(self, session_id: str, cwd: str) -> None:
        """Note whether a deny rule applies in `cwd` (rules that cannot be read count: the gate
        then refuses each call, as it must)."""
        try:
            denies = any(rule.decision == "deny" for rule in self.rules.rules_kept(cwd))
        except (RuleStoreError, OSError):
            denies = True
        if denies:
            self._guarded.add(session_id)
        else:
            self._guarded.discard(session_id)

    def check(self, run: RunView) -> AskTool:
        """The permission check of one run's tool calls (the agent asks it before each one)."""

        async def check(call: ToolCheck) -> ToolVerdict:
            return await self._check(run, call)

        return check

    async def trusts(self, run: RunView, env: dict[str, str]) -> bool:
        """Whether `run`'s agent may load its folder's project files: the user's decision, asked
        through the approver in the run's mode when there is none yet."""
        mode = run.params.mode or self.mode_of(run.options.session_id)
        return await self.trust.decide(run, self.approver, mode, env)

    def file_ops(self, run: RunView, environ: Mapping[str, str]) -> DoFileOp:
        """How one run's agent file operations are done, under its file access policy."""
        return file_ops(run, lambda: self.file_access(run, environ), self.editor, self._confine(run))

    def _confine(self, run: RunView) -> Confine:
        """How the run's sandbox wraps a command the editor's terminal runs (the command line
        the agent's own shell would run); a sandboxed run whose sandbox cannot be read runs none."""

        def confine(command: str) -> Sequence[str] | str:
            if not run.sandboxed:
                return unconfined_command(command, os.environ)
            argv = self.sandboxes.command_line(run.session_id, command)
            return argv if argv is not None else "sandbox: the run's sandbox cannot be read: nothing runs"

        return confine

    def file_access(self, run: RunView, environ: Mapping[str, str] | None = None) -> FileAccess:
        """The run's file access policy (built once per run)."""
        if run.file_access is None:
            env = environ if environ is not None else os.environ
            secrets = self.sandboxes.agent_secrets(env)
            run.file_access = file_access(run, str(self.base), env, secrets)
        return run.file_access

    def dialogs(self, run: RunView) -> AskDialog:
        """How one run's agent dialogs are answered (questions.py), by the front's questioner."""
        return dialogs_for(run, self.questioner)

    async def _check(self, run: RunView, call: ToolCheck) -> ToolVerdict:
        if run.before_tools is not None:
            run.take_checkpoint()
            await run.before_tools.wait()  # no tool changes a file before the checkpoint is taken
        cwd, session_id = run.options.cwd, run.session_id
        try:
            rules = await self.rules.rules_async(cwd)
        except (RuleStoreError, OSError) as exc:
            log.warning("tool call %s denied: the rules cannot be read: %s", call.tool_call_id, exc)
            return self._refused(run, call, f"denied: the permission rules cannot be read ({exc})", "mode")
        access = self.file_access(run)
        if call.path is not None and call.kind in ("read", "edit"):
            # The path as the tool will touch it: pi's resolution, then every symlink followed.
            try:
                real = access.judge_read(call.path)
            except Refused as exc:
                return self._refused(run, call, str(exc), "mode")
            run.judged_paths[call.tool_call_id] = real
            call = dataclasses.replace(call, path=real)
        tool_call = ToolCall(
            tool=call.tool, kind=call.kind, command=call.command, path=call.path, session_id=session_id
        )
        approver = self.approver
        mode = self.mode_of(session_id)
        verdict = decide(tool_call, mode, cwd, rules, can_answer=approver is not None)
        if verdict.decision == "allow" and _agent_config_edit(verdict.by, mode, call, access):
            # Code that runs later outside any sandbox (agent config, git hooks): never unasked.
            if approver is None:
                return self._refused(run, call, "denied: the workspace's agent config is asked about", "mode")
            return await self._ask_user(run, call, approver)
        if verdict.decision == "allow":
            if verdict.by == "rule":
                _resolved(run, call, "allow", "rule", rule=verdict.rule)
            return ToolVerdict(allow=True)
        if verdict.decision == "refuse" or approver is None:
            return self._refused(run, call, verdict.reason or "denied", verdict.by, verdict.rule)
        return await self._ask_user(run, call, approver)

    def _refused(
        self, run: RunView, call: ToolCheck, reason: str, by: DecidedBy, rule: PermissionRule | None = None
    ) -> ToolVerdict:
        _resolved(run, call, "reject", by, rule=rule)
        run.denied.add(call.tool_call_id)
        return ToolVerdict(allow=False, reason=reason)

    async def _ask_user(self, run: RunView, call: ToolCheck, approver: Approver) -> ToolVerdict:
        """Put the call to the user; exactly one permission.resolved follows the request, however
        the wait ends (an answer, the run's cancel, the agent's death)."""
        cwd = run.options.cwd
        request = ApprovalRequest(
            run_id=run.run_id,
            session_id=run.session_id,
            tool_call_id=call.tool_call_id,
            tool=call.tool,
            kind=call.kind,
            title=title_of(call),
            input=call.input,
            diff=await proposed_diff(call.change, cwd, read=self._diff_reader(run, call)),
            options=options_for(call, cwd),
            command=call.command,
            path=call.path,
        )
        requested = contract.PermissionRequestedContent(
            tool_call_id=call.tool_call_id, tool=call.tool, title=request.title, options=list(request.options)
        )
        run.emit([Out("permission.requested", _wire(requested))])
        option = None
        try:
            answer = await ask(approver, request, run.cancel)
            option = request.option(answer.option_id)
        finally:
            if option is None:
                _resolved(run, call, "cancelled", "user")
                run.denied.add(call.tool_call_id)
        if option is None:
            return ToolVerdict(allow=False, reason="denied: the user gave no answer")
        if option.kind.startswith("allow"):
            await self._keep_rule(cwd, option.rule)
            _resolved(run, call, "allow", "user", option=option)
            return ToolVerdict(allow=True)
        await self._keep_rule(cwd, option.rule)
        _resolved(run, call, "reject", "user", option=option)
        run.denied.add(call.tool_call_id)
        return ToolVerdict(allow=False, reason=answer.message or "denied by the user")

    def _diff_reader(self, run: RunView, call: ToolCheck) -> Callable[[str], str]:
        """How the approval's diff reads the file: the path judged for the call (as the model
        gave it, it is only shown), under the run's policy."""
        access, judged = self.file_access(run), run.judged_paths.get(call.tool_call_id)
        return lambda path: access.read_text(judged or path, MAX_DIFF_BYTES)

    async def _keep_rule(self, cwd: str, rule: PermissionRule | None) -> None:
        """Save an "always" option's rule; a store that refuses it leaves this one answer standing."""
        if rule is None:
            return
        try:
            await self.rules.add_async(cwd, rule)
        except (RuleStoreError, OSError, ValueError) as exc:
            log.warning("the rule %s was not saved: %s", rule.id, exc)

    def close(self) -> None:
        """The bridge is done: its mode and sandbox files go."""
        self.board.remove()
        self.sandboxes.remove()


def _agent_config_edit(by: DecidedBy, mode: PermissionMode, call: ToolCheck, access: FileAccess) -> bool:
    """Whether auto-edit would let an edit of the workspace's agent config or hooks run unasked."""
    return (
        mode == "auto-edit"
        and by == "mode"
        and call.kind == "edit"
        and call.path is not None
        and access.is_agent_config(call.path)
    )


def _resolved(
    run: RunView,
    call: ToolCheck,
    decision: Literal["allow", "reject", "cancelled"],
    by: Literal["user", "rule", "mode"],
    *,
    option: PermissionOption | None = None,
    rule: PermissionRule | None = None,
) -> None:
    content = contract.PermissionResolvedContent(
        tool_call_id=call.tool_call_id,
        decision=decision,
        by=by,
        option_id=option.option_id if option else None,
        rule=option.rule if option else rule,
    )
    run.emit([Out("permission.resolved", _wire(content))])


def _wire(content: contract.WireModel) -> dict[str, Any]:
    return content.model_dump(mode="json", by_alias=True, exclude_none=True)
