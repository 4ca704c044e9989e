"""The file operations an agent's own tools hand to the bridge, done under the run's policy."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import anyio.to_thread

from bridge.agents.values import DoFileOp, FileOp, FileOpResult
from bridge.editor.editor_commands import Confine, EditorCommands
from bridge.editor.editor_files import EditorAnswer, EditorFiles
from bridge.policy import sandbox
from bridge.policy.file_access import MAX_READ_BYTES, FileAccess, Refused, within
from bridge.policy.run_view import RunView

#: The most of a written file's old text told for its diff (bridge/engines/diff_capture.py).
MAX_ORIGINAL_BYTES = 1024 * 1024
#: Tools that work on a tree: their operations stay inside the judged path, not on it.
_TREE_TOOLS = frozenset({"ls", "find", "grep"})
#: Up to this, a read or write is done on the event loop.
_SMALL_BYTES = 256 * 1024
#: Read from the disk even with an editor: pi's read shows these as images, not text.
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})


def file_access(
    run: RunView, state_dir: str, environ: Mapping[str, str], agent_secrets: Sequence[str]
) -> FileAccess:
    """The policy of `run`: its folder, its sandbox's mode, and everything kept out."""
    mode = run.options.sandbox.mode if run.options.sandbox is not None else "off"
    kept_out = [state_dir, *sandbox.hidden_paths(environ, agent_secrets)]
    return FileAccess.of(run.options.cwd, mode, kept_out)


def file_ops(
    run: RunView,
    access: Callable[[], FileAccess],
    editor: EditorFiles | None = None,
    confine: Confine | None = None,
) -> DoFileOp:
    """How one run's file operations are done (`access` is built on the first one); reads and
    writes the policy allows go to `editor` first, when the front has one, and so do the shell
    tool's commands (editor_commands.py; `confine` is the run's sandbox)."""
    commands = (
        EditorCommands(editor, run.cancel, confine or (lambda command: ("bash", "-c", command)))
        if editor is not None
        else None
    )

    async def do(op: FileOp) -> FileOpResult:
        session_id = run.session_id
        if op.op in ("exec", "poll", "kill"):
            if commands is not None and session_id is not None:
                return await commands.do(session_id, op)
            return FileOpResult(local=True) if op.op == "exec" else FileOpResult(error="refused: no terminal")
        policy = access()
        if editor is not None and session_id is not None and op.op in ("read", "write"):
            done = await _through_editor(policy, run.judged_paths, op, editor, session_id)
            if done is not None:
                return done
        if _large(op):  # off the event loop; a small one costs less than the thread's hop
            return await anyio.to_thread.run_sync(do_op, policy, run.judged_paths, op)
        return do_op(policy, run.judged_paths, op)

    return do


async def _through_editor(
    policy: FileAccess, judged: Mapping[str, str], op: FileOp, editor: EditorFiles, session_id: str
) -> FileOpResult | None:
    """A read or write done by the editor once the policy allowed it; None: the editor does not
    take it (or the policy refused it: `do_op` then says why, as without an editor)."""
    if _held_to(policy, judged, op):
        return None
    try:
        real = policy.judge_write(op.path) if op.op == "write" else policy.judge_read(op.path)
        kind = policy.kind(real)
    except OSError:
        return None
    if kind not in ("file", "missing") or os.path.splitext(real)[1].lower() in _IMAGE_SUFFIXES:
        return None
    if not editor.takes(real, write=op.op == "write"):
        return None
    if op.op == "read":
        return _read_result(real, await editor.read_text(session_id, real))
    try:
        text = (op.data or b"").decode()
    except UnicodeDecodeError:
        return None  # not text: the editor's text surface cannot hold it
    original = await _original(policy, real, kind, editor, session_id)
    answer = await editor.write_text(session_id, real, text)
    if not answer.taken:
        return None
    if answer.error is not None:
        return FileOpResult(error=answer.error)
    return FileOpResult(kind=kind, data=original)


def _read_result(real: str, answer: EditorAnswer) -> FileOpResult | None:
    """The bytes of an editor's read (None: it did not take it)."""
    if not answer.taken:
        return None
    if answer.error is not None or answer.text is None:
        return FileOpResult(error=answer.error or f"the editor could not read {real}")
    data = answer.text.encode()
    if len(data) > MAX_READ_BYTES:
        return FileOpResult(error=f"refused: {real} is larger than {MAX_READ_BYTES} bytes")
    return FileOpResult(data=data)


async def _original(
    policy: FileAccess, real: str, kind: str, editor: EditorFiles, session_id: str
) -> bytes | None:
    """What a file about to be written held, as the editor shows it (else the disk's), for the
    change's diff; None when it did not exist or is too big."""
    if kind != "file":
        return None
    answer = await editor.read_text(session_id, real)
    if answer.taken and answer.error is None and answer.text is not None:
        data = answer.text.encode()
    else:
        try:
            data = policy.read_bytes(real, MAX_ORIGINAL_BYTES)
        except (OSError, Refused):
            return None
    return data if len(data) <= MAX_ORIGINAL_BYTES else None


def _large(op: FileOp) -> bool:
    if op.op == "write":
        return len(op.data or b"") > _SMALL_BYTES
    if op.op != "read":
        return False
    try:
        return os.stat(op.path).st_size > _SMALL_BYTES  # a hint only: the policy opens it
    except OSError:
        return False


def do_op(policy: FileAccess, judged: Mapping[str, str], op: FileOp) -> FileOpResult:
    """Do one operation; any refusal or failure is the error the tool throws."""
    try:
        held = _held_to(policy, judged, op)
        if held:
            return FileOpResult(error=held)
        if op.op == "read":
            return FileOpResult(data=policy.read_bytes(op.path))
        if op.op == "write":
            return _write(policy, op)
        if op.op == "mkdir":
            policy.mkdir(op.path)
        elif op.op == "access":
            policy.access(op.path, write=op.write)
        elif op.op == "kind":
            return FileOpResult(kind=policy.kind(op.path))
        elif op.op == "listdir":
            return FileOpResult(names=tuple(sorted(policy.listdir(op.path))))
        elif op.op == "search":
            policy.judge_search(op.path)
            return FileOpResult(kind=policy.kind(op.path))
        return FileOpResult()
    except OSError as exc:
        message = exc.strerror or str(exc)
        return FileOpResult(error=message if op.path in message else f"{message}: {op.path}")


def _write(policy: FileAccess, op: FileOp) -> FileOpResult:
    """Write the file, its missing parent made here (one round trip per write); what it held."""
    try:
        original = policy.write_bytes(op.path, op.data or b"", keep=MAX_ORIGINAL_BYTES)
    except FileNotFoundError:
        policy.mkdir(os.path.dirname(op.path))
        original = policy.write_bytes(op.path, op.data or b"", keep=MAX_ORIGINAL_BYTES)
    return FileOpResult(kind="file" if original.existed else "missing", data=original.data)


def _held_to(policy: FileAccess, judged: Mapping[str, str], op: FileOp) -> str | None:
    """Why `op` is not on the path its tool call was judged for (None: it is, or none was)."""
    path = judged.get(op.tool_call_id)
    if path is None:
        return None
    real = policy.resolve(op.path)
    if (
        real == path
        or (op.op == "mkdir" and within(path, real))
        or (op.tool in _TREE_TOOLS and within(real, path))
    ):
        return None
    return f"refused: {op.path} is not the path this call was approved for ({path})"
