"""The pygls server: thin handlers for pi/cancel, pi/runs, pi/sessions, pi/session, pi/steer,
pi/closeSession and the lifecycle; pi/run is served from its frame by bridge/fronts/lsp/run_requests.py."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Generator
from typing import Any, BinaryIO, TypeVar
from urllib.parse import unquote

import anyio
import anyio.abc
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from bridge import __version__, contract
from bridge.config import BridgeConfig, resolve_config
from bridge.fronts.lifecycle import Stop, serve_until_stopped
from bridge.fronts.lsp.approver import LspApprover
from bridge.fronts.lsp.client_requests import ClientRequests, client_answers
from bridge.fronts.lsp.converter import dict_converter
from bridge.fronts.lsp.editor import LspEditor
from bridge.fronts.lsp.params import parse_params
from bridge.fronts.lsp.questioner import LspQuestioner
from bridge.fronts.lsp.reader import read_frames
from bridge.fronts.lsp.run_requests import RunRequests
from bridge.fronts.lsp.writer import QueuedWriter, notification_frame
from bridge.policy.gate import FrontPolicy, Gate
from bridge.policy.rule_store import RuleStore, RuleStoreError
from bridge.runs import history
from bridge.runs.conversation_admin import ConversationAdmin, ConversationAdminError
from bridge.runs.registry import AgentAdapter, AgentChoiceError, RunRegistry, effective_settings

log = logging.getLogger(__name__)

# Answers the protocol gives on purpose (bad params, a cancelled run): not server errors.
EXPECTED_ERRORS = (JsonRpcInvalidParams, JsonRpcRequestCancelled)
# The answer to pi/permissions and pi/setPermissions when the rule store cannot be trusted or read.
RULE_STORE_ERROR = -32000
TOOLBOX_ERROR = -32000
T = TypeVar("T")
NO_SESSION = -32002


class _ExpectedErrorFilter(logging.Filter):
    """Keep pygls from logging a traceback for every invalid param and every user cancel."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], EXPECTED_ERRORS))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_ExpectedErrorFilter())


class BridgeProtocol(LanguageServerProtocol):
    """LSP protocol with the bridge's initialize answer and an exit that goes through cleanup."""

    _server: BridgeServer

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        result: types.InitializeResult = yield from super().lsp_initialize(params)
        registry = self._server.registry
        available, reason = registry.checkpoints.status()
        capabilities = contract.ServerCapabilities(
            settings=effective_settings(registry.config),
            agents=registry.agents.agents_info(),
            default_agent=registry.agents.default_agent(),
            checkpoints=contract.CheckpointsCapability(available=available, reason=reason),
            sandbox=registry.sandbox_availability(),
        ).model_dump(mode="json", by_alias=True)
        result.capabilities.experimental = {"piBridge": capabilities}
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(
        self, params: types.DidChangeTextDocumentParams
    ) -> Generator[Any, Any, None]:
        # A change to a document the client never opened here has nothing to apply to (pygls
        # would raise KeyError): the bridge keeps reading that file from disk.
        if unquote(params.text_document.uri) not in self.workspace.text_documents:
            log.warning(
                "textDocument/didChange for %s, which was never opened: ignored", params.text_document.uri
            )
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls would sys.exit() here, cutting the runs' cleanup short; stop through serve().
        self._server.request_stop("exit notification")
        yield from ()


class BridgeServer(LanguageServer):
    """The pi-bridge language server: a pygls server plus the run registry and the writer."""

    def __init__(self, adapter: AgentAdapter, base_config: BridgeConfig, *, strict: bool = False) -> None:
        super().__init__(
            contract.SERVER_NAME,
            __version__,
            protocol_cls=BridgeProtocol,
            converter_factory=dict_converter,
        )
        self.adapter = adapter
        self.base_config = base_config
        self.strict = strict
        self.writer: QueuedWriter | None = None
        gate = Gate(base_config.default_mode or "full")
        # The front's hold on policy: its client's surfaces, the modes, the rules.
        self.policy: FrontPolicy = gate
        self.registry = RunRegistry(adapter, base_config, self.send_messages, gate=gate)
        self.stop: Stop | None = None
        self.default_cwd = os.getcwd()
        # pi/run is served from its frame (bridge/fronts/lsp/run_requests.py), not by a pygls handler.
        self.run_requests = RunRequests(self.protocol, self.registry, lambda: self.default_cwd)
        # Approvals and dialogs put to the client; their answers are taken ahead of pygls too.
        self.client_requests = ClientRequests(self.protocol)
        self.rule_store: RuleStore = self.policy.rules
        self.admin = ConversationAdmin(self.registry)

    def serve_directly(self, message: dict[str, Any]) -> bool:
        """What the reader hands over ahead of pygls: answers to the bridge's own requests, and
        pi/run (True: served here)."""
        return self.client_requests.take_answer(message) or self.run_requests.handle(message)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Log only: pygls's default tries to tell the client, which fails again once stdout is gone."""
        expected = isinstance(error, EXPECTED_ERRORS)
        cause = error.__cause__ or error.__context__ or error  # pygls wraps the handler's error
        # pygls keeps a failed notification's traceback in the error's data, not in the chain.
        data = getattr(error, "data", None)
        where = data.get("traceback") if isinstance(data, dict) else None
        log.log(
            logging.INFO if expected else logging.ERROR,
            "%s: %s%s",
            getattr(source, "__name__", source),
            error,
            "\n" + "".join(where) if isinstance(where, list) and not expected else "",
            exc_info=None if expected else cause,  # an unexpected error: where it came from
        )

    def request_stop(self, reason: str) -> None:
        """Ask `serve` to stop every run and exit (nothing before it serves)."""
        if self.stop is not None:
            self.stop.request(reason)

    def send_messages(self, payloads: list[dict[str, Any]]) -> None:
        """Send pi/message notifications, pre-serialized, as one write (the hot path)."""
        if self.strict:
            for payload in payloads:
                contract.pi_message_adapter().validate_python(payload)
        if self.writer is not None:
            self.writer.write(b"".join(notification_frame(contract.MESSAGE, payload) for payload in payloads))


def create_server(adapter: AgentAdapter, base_config: BridgeConfig, *, strict: bool = False) -> BridgeServer:
    """Build the server and register its handlers."""
    server = BridgeServer(adapter, base_config, strict=strict)
    _lifecycle_features(server)
    _run_features(server)
    _session_features(server)
    _permission_features(server)
    _admin_features(server)
    _document_features(server)
    return server


def _document_features(server: BridgeServer) -> None:
    """textDocument/didOpen, didChange and didClose: pygls keeps each open document's text (the
    agent's reads see it, its writes go through the editor: fronts/lsp/editor.py); registered so
    the server declares it wants them (`textDocumentSync.openClose`)."""

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: BridgeServer, params: types.DidOpenTextDocumentParams) -> None:
        return None

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: BridgeServer, params: types.DidChangeTextDocumentParams) -> None:
        return None

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: BridgeServer, params: types.DidCloseTextDocumentParams) -> None:
        return None


def _lifecycle_features(server: BridgeServer) -> None:
    """initialize, initialized and shutdown."""

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: BridgeServer, params: types.InitializeParams) -> None:
        config, warnings = resolve_config(ls.base_config, params.initialization_options)
        for warning in warnings:
            log.warning("%s", warning)
            ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=warning))
        answers, client = client_answers(params.capabilities), ls.client_requests
        asks = answers.permissions or answers.message_requests
        workspace = params.capabilities.workspace if params.capabilities else None
        applies = workspace is not None and workspace.apply_edit is True
        ls.policy.attach_client(
            LspApprover(client, permission_requests=answers.permissions) if asks else None,
            LspQuestioner(client, answers),
            LspEditor(client, lambda: ls.workspace, applies_edits=applies),
        )
        ls.registry.reconfigure(config)
        folders = params.workspace_folders or []
        root = folders[0].uri if folders else params.root_uri
        if root and root.startswith("file://"):
            from pygls.uris import to_fs_path

            path = to_fs_path(root)
            if path and os.path.isdir(path):
                ls.default_cwd = path

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls: BridgeServer, params: Any) -> None:
        # Async, so pygls runs it in a task: a sync handler runs in the reader's callback, outside
        # any task, where anyio (sniffio installed, as in VS Code's bundle) finds no event loop and
        # even spawn_background raises NoEventLoopError. The work itself goes to the registry's
        # task group, which ends with it.
        async def after_initialized() -> None:
            ls.registry.prime_live(ls.default_cwd)
            # The workspace's first snapshot waits for a conversation to open (an editor opens
            # one as its chat shows, pi/commands): hashing every file of it at each editor start,
            # agent used or not, would cost every user, and every test, that much CPU.
            await ls.registry.prepare_first_prompt()

        ls.registry.spawn_background(after_initialized)

    @server.feature(types.SHUTDOWN)
    async def on_shutdown(ls: BridgeServer, *args: Any) -> None:
        # Every run's answer (-32800 with its data) is written as it ends: before this answer.
        await ls.registry.stop_all("the client asked the bridge to shut down")


def _run_features(server: BridgeServer) -> None:
    """pi/cancel, pi/steer, pi/closeSession and pi/runs (pi/run itself: run_requests.py)."""

    @server.feature(contract.CANCEL)
    async def pi_cancel(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.CancelParams, raw)
        result = await ls.registry.cancel(params.run_id)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.STEER)
    async def pi_steer(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.SteerParams, raw)
        result = await ls.registry.steer(params.run_id, params.message)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.CLOSE_SESSION)
    async def pi_close_session(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.CloseSessionParams, raw)
        closed = await ls.registry.close_session(params.session_id)
        return contract.CloseSessionResult(session_id=params.session_id, closed=closed).model_dump(
            mode="json", by_alias=True
        )

    @server.feature(contract.RUNS)
    def pi_runs(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        return ls.registry.list().model_dump(mode="json", by_alias=True, exclude_none=True)


def _session_features(server: BridgeServer) -> None:
    """pi/sessions and pi/session: the agents' stored conversations."""

    @server.feature(contract.SESSIONS)
    async def pi_sessions(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.SessionsParams, raw)
        if params.cwd is not None and not os.path.isabs(params.cwd):
            raise JsonRpcInvalidParams(message=f"cwd: {params.cwd!r} is not an absolute path")
        cwd, registry = params.cwd or ls.default_cwd, ls.registry
        result = await history.list_sessions(
            registry.agents.history_adapters(),
            cwd,
            params.limit,
            registry.config.env,
            registry.is_live_session,
            registry.agents.recorded_of(cwd),
        )
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.SESSION)
    async def pi_session(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.SessionParams, raw)
        result: contract.SessionHistory | contract.SessionNotFound | None = await history.read_session(
            ls.registry.agents.history_adapters(), params.session_id, ls.registry.config.env
        )
        if isinstance(result, contract.SessionNotFound):  # an ACP agent's, which it replays
            result = await _admin_call(ls.admin.recorded_history(params.session_id)) or result
        assert result is not None
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def _permission_features(server: BridgeServer) -> None:
    """pi/permissions and pi/setPermissions: the rules, kept by bridge/policy/rule_store.py."""

    @server.feature(contract.PERMISSIONS)
    async def pi_permissions(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.PermissionsParams, raw)
        rules = await _rule_store_call(ls.rule_store.rules_async(params.cwd))
        return _rules_result(params.cwd, rules)

    @server.feature(contract.SET_PERMISSIONS)
    async def pi_set_permissions(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.SetPermissionsParams, raw)
        rules = await _rule_store_call(ls.rule_store.replace_async(params.cwd, params.rules))
        return _rules_result(params.cwd, rules)

    @server.feature(contract.SET_MODE)
    async def pi_set_mode(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.SetModeParams, raw)
        ls.policy.set_mode(params.session_id, params.mode)
        return contract.SetModeResult(session_id=params.session_id, mode=params.mode).model_dump(
            mode="json", by_alias=True
        )


def _admin_features(server: BridgeServer) -> None:
    """pi/commands, pi/models, pi/renameSession and pi/deleteSession (bridge/runs/conversation_admin.py)."""

    @server.feature(contract.COMMANDS)
    async def pi_commands(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.CommandsParams, raw)
        result = await _admin_call(
            ls.admin.commands(params.session_id, _admin_cwd(ls, params.cwd), params.agent)
        )
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.MODELS)
    async def pi_models(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.ModelsParams, raw)
        result = await _admin_call(
            ls.admin.models(params.session_id, _admin_cwd(ls, params.cwd), params.agent)
        )
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.RENAME_SESSION)
    async def pi_rename_session(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.RenameSessionParams, raw)
        result = await _admin_call(ls.admin.rename(params.session_id, params.title))
        return result.model_dump(mode="json", by_alias=True)

    @server.feature(contract.CHECKPOINTS)
    async def pi_checkpoints(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.CheckpointsParams, raw)
        result = await _admin_call(ls.admin.checkpoints(params.session_id))
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    @server.feature(contract.REWIND)
    async def pi_rewind(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.RewindParams, raw)
        result = await _admin_call(ls.admin.rewind(params))
        return result.model_dump(mode="json", by_alias=True)

    @server.feature(contract.CHECKPOINT_FILE)
    async def pi_checkpoint_file(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.CheckpointFileParams, raw)
        result = await _admin_call(
            ls.admin.checkpoint_file(params.session_id, params.checkpoint_id, params.path)
        )
        return result.model_dump(mode="json", by_alias=True)

    @server.feature(contract.DELETE_SESSION)
    async def pi_delete_session(ls: BridgeServer, raw: Any) -> dict[str, Any]:
        params = parse_params(contract.DeleteSessionParams, raw)
        result = await _admin_call(ls.admin.delete(params.session_id))
        return result.model_dump(mode="json", by_alias=True)


def _admin_cwd(ls: BridgeServer, cwd: str | None) -> str:
    """A toolbox request's `cwd` (default: the bridge's), which must be an absolute directory."""
    if cwd is not None and not (os.path.isabs(cwd) and os.path.isdir(cwd)):
        raise JsonRpcInvalidParams(message=f"cwd: {cwd!r} is not an absolute path of a directory")
    return cwd or ls.default_cwd


async def _admin_call(call: Awaitable[T]) -> T:
    """Await a toolbox call; what cannot be done is the client's error, with why."""
    try:
        return await call
    except ConversationAdminError as exc:
        raise JsonRpcException(
            message=str(exc), code=NO_SESSION if exc.not_found else TOOLBOX_ERROR
        ) from None
    except AgentChoiceError as exc:  # an unknown agent, or a session of another agent than the one named
        raise JsonRpcInvalidParams(message=f"agent: {exc}") from None


async def _rule_store_call(call: Awaitable[list[contract.PermissionRule]]) -> list[contract.PermissionRule]:
    """Await a rule store call; a broken store is a server error naming the file and the problem."""
    try:
        return await call
    except (RuleStoreError, OSError) as exc:
        raise JsonRpcException(message=str(exc), code=RULE_STORE_ERROR) from None


def _rules_result(cwd: str, rules: list[contract.PermissionRule]) -> dict[str, Any]:
    return contract.PermissionsResult(cwd=cwd, rules=rules).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


async def serve(server: BridgeServer, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Serve JSON-RPC on the given streams until exit, end of input or a signal; stop runs first."""
    writer = QueuedWriter(stdout)
    writer.bind_loop(asyncio.get_running_loop())
    server.writer = writer
    server.registry.wait_writable = writer.wait_writable
    server.protocol.set_writer(writer)
    server.protocol._include_headers = True
    stop = server.stop = Stop()

    def start_front(tasks: anyio.abc.TaskGroup) -> None:
        tasks.start_soon(read_frames, stdin, server.protocol, server.request_stop, server.serve_directly)

    try:
        await serve_until_stopped(
            server.registry,
            stop,
            name="pi-bridge",
            start_front=start_front,
            cancel_reason=lambda why: f"the bridge is stopping ({why})",
        )
    finally:
        await anyio.to_thread.run_sync(writer.drain, 2.0)
        writer.close()
    return 0 if server.protocol._shutdown or stop.reason != "exit notification" else 1


def run_stdio(server: BridgeServer) -> int:
    """Serve on this process's stdin/stdout; returns the exit code."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    # stdout belongs to JSON-RPC: anything else printing to it would corrupt the framing.
    sys.stdout = sys.stderr
    return asyncio.run(serve(server, stdin, stdout))
