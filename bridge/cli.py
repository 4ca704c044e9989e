"""Command line: `pi-bridge` serves JSON-RPC on stdio; `demo` shows one run end to end; `doctor` checks;
`trust` saves a workspace's project-trust decision.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bridge import __version__

if TYPE_CHECKING:  # the runtime imports stay lazy: `doctor` must run without the dependencies
    from bridge.agents.seam import AgentAdapter

AGENT_HELP = "the agent CLI that runs prompts: pi (the default) or claude; a run may name another"
SCRIPTED_PROVIDER = "fake"
SCRIPTED_DEFAULT_MODEL = "text"


def _setup_logging(level: str, log_file: str | None) -> None:
    handler: logging.Handler = (
        logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    )
    form = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    try:
        from bridge.policy.redact import RedactingFormatter
    except ImportError:  # `pi-bridge doctor` must start without the bridge's dependencies to name them
        handler.setFormatter(logging.Formatter(form))
    else:
        handler.setFormatter(RedactingFormatter(form))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pygls logs every message body at INFO: keep prompts and outputs out of the log.
    logging.getLogger("pygls").setLevel(max(logging.WARNING, root.level))


@contextlib.contextmanager
def scripted_model_env(adapter: AgentAdapter) -> Iterator[dict[str, str]]:
    """Start the built-in scripted model and a throwaway agent configuration pointing at it."""
    from bridge.agents.seam import ScriptedModelSetup
    from bridge.scripted_model import ScriptedModelServer

    with tempfile.TemporaryDirectory(prefix="pi-bridge-agent-") as workdir, ScriptedModelServer() as model:
        if not isinstance(adapter, ScriptedModelSetup):
            raise ValueError(f"{adapter.display_name} cannot be pointed at the scripted model")
        yield adapter.model_server_env(model.base_url, Path(workdir), SCRIPTED_PROVIDER)


def serve_main(args: argparse.Namespace) -> int:
    """Serve JSON-RPC on stdio until exit, end of input or a signal."""
    from bridge.agents import DEFAULT_AGENT, build_adapter
    from bridge.config import BridgeConfig, command_from
    from bridge.fronts.lsp.server import create_server, run_stdio
    from bridge.process.memory import return_big_blocks

    return_big_blocks()  # a big prompt's memory goes back to the system once it is freed
    # The agent named here is the server's own: its conversations are live (the rpc engine).
    adapter = build_adapter(DEFAULT_AGENT)
    if args.agent:
        chosen = _agent_or_exit(args.agent)
        if chosen is None:
            return 2
        adapter = chosen
    # --pi-command is pi's; any other agent runs its executable on PATH.
    command = command_from(args.pi_command) if adapter.name == DEFAULT_AGENT else adapter.default_command
    config = BridgeConfig(command=command, default_agent=args.agent)
    strict = os.environ.get("PI_BRIDGE_STRICT") == "1"
    with contextlib.ExitStack() as stack:
        if args.scripted_model:
            env = stack.enter_context(scripted_model_env(adapter))
            if adapter.name != DEFAULT_AGENT:  # a run may still name pi
                env = {**stack.enter_context(scripted_model_env(build_adapter(DEFAULT_AGENT))), **env}
            config = BridgeConfig(
                command=config.command,
                default_provider=SCRIPTED_PROVIDER,
                default_model=SCRIPTED_DEFAULT_MODEL,
                env=env,
                default_agent=args.agent,
            )
        server = create_server(adapter, config, strict=strict)
        return run_stdio(server)


def _agent_or_exit(name: str) -> AgentAdapter | None:
    """The adapter named on the command line, or None after saying why there is none."""
    from bridge.agents import UnknownAgentError, build_adapter

    try:
        return build_adapter(name)
    except UnknownAgentError as exc:
        print(f"pi-bridge: {exc}", file=sys.stderr)
        return None


def acp_main(args: argparse.Namespace) -> int:
    """Serve the Agent Client Protocol (v1) on stdio.

    stdin is read from here on, before the runtime is imported: a plain `initialize` is answered
    while the rest loads (bridge/fronts/acp/first_frame.py)."""
    if args.login is not None:
        from bridge.agents import pi_login

        return pi_login(args.login, args.pi_command)
    chosen = None
    if args.agent is not None:  # an agent named on the command line is checked before serving
        chosen = _agent_or_exit(args.agent)
        if chosen is None:
            return 2
    from bridge.fronts.acp.first_frame import FirstFrame

    first = FirstFrame.start()
    from bridge.agents import DEFAULT_AGENT
    from bridge.config import BridgeConfig, command_from
    from bridge.contract import RetryPolicy
    from bridge.fronts.acp.serve import run_acp
    from bridge.process.memory import return_big_blocks

    return_big_blocks()  # a big prompt's memory goes back to the system once it is freed
    adapter = chosen or _agent_or_exit(DEFAULT_AGENT)
    if adapter is None:
        return 2
    retry = RetryPolicy(max_attempts=args.retry_attempts)
    # --pi-command is pi's; any other agent runs its executable on PATH.
    command = command_from(args.pi_command) if adapter.name == DEFAULT_AGENT else adapter.default_command
    config = BridgeConfig(command=command, retry=retry, default_mode=args.default_mode)
    with contextlib.ExitStack() as stack:
        if args.scripted_model:
            env = stack.enter_context(scripted_model_env(adapter))
            config = BridgeConfig(
                command=config.command,
                retry=retry,
                default_mode=args.default_mode,
                default_provider=SCRIPTED_PROVIDER,
                default_model=SCRIPTED_DEFAULT_MODEL,
                env=env,
            )
        if args.no_warm_pool:  # no spare agent: every session/new starts its own
            config = dataclasses.replace(config, warm_pool=False)
        if args.plan_tool:
            from bridge.config import PLAN_TOOL_ENV

            config = dataclasses.replace(config, plan_tool=True, env={**config.env, PLAN_TOOL_ENV: "1"})
        return run_acp(first, adapter, config)


def demo_main(args: argparse.Namespace) -> int:
    """Run one prompt through a real bridge and a real pi against the scripted model; print it."""
    from bridge.tools.demo import run_demo

    return run_demo(args.prompt, model=args.model, pi_command=args.pi_command)


def doctor_main(args: argparse.Namespace) -> int:
    """Check Python, the bridge's dependencies, Node, pi and its models; report the fixes."""
    from bridge.tools.doctor import doctor_main as run_doctor

    return run_doctor(args.pi_command, args.scripted_model, args.json, args.agent)


def trust_main(args: argparse.Namespace) -> int:
    """Save, show or forget whether a workspace's own agent settings and extensions may load."""
    from bridge.tools.trust import trust_main as run_trust

    return run_trust(args.folder, never=args.never, forget=args.forget, show=args.show)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `pi-bridge`."""
    parser = argparse.ArgumentParser(
        prog="pi-bridge", description="Drive the pi coding agent from editors over JSON-RPC (stdio)."
    )
    parser.add_argument("--version", action="version", version=f"pi-bridge {__version__}")
    parser.add_argument("--pi-command", help="how to run pi, shell-style (split, never run through a shell)")
    parser.add_argument(
        "--scripted-model",
        action="store_true",
        # The variable lets an editor's bundled bridge try the scripted model without a setting.
        default=os.environ.get("PI_BRIDGE_SCRIPTED_MODEL") == "1",
        help="serve against the built-in scripted model (no API key, offline; or PI_BRIDGE_SCRIPTED_MODEL=1)",
    )
    # Not choices=: listing the agents imports the runtime, and `doctor` must run without it.
    parser.add_argument("--agent", default=None, help=AGENT_HELP)
    parser.add_argument("--log-level", default=os.environ.get("PI_BRIDGE_LOG_LEVEL", "WARNING"))
    parser.add_argument("--log-file", default=os.environ.get("PI_BRIDGE_LOG_FILE"))
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve JSON-RPC on stdio (the default)")
    acp = sub.add_parser("acp", help="serve the Agent Client Protocol (ACP v1) on stdio")
    acp.add_argument("--agent", default=argparse.SUPPRESS, help=AGENT_HELP)
    acp.add_argument("--retry-attempts", type=int, default=1, choices=range(1, 11), metavar="1..10")
    acp.add_argument(
        "--default-mode",
        choices=("ask", "auto-edit", "plan", "full"),
        default=None,
        help="the permission mode every session starts in (default: ask)",
    )
    acp.add_argument(
        "--plan-tool",
        action="store_true",
        help="offer pi the bridge's `todo` tool, whose list becomes the session's plan",
    )
    acp.add_argument(
        "--no-warm-pool",
        action="store_true",
        help="start no spare agent ahead of the next session/new (it boots while a session may be in use)",
    )
    acp.add_argument(
        "--login",
        nargs="?",
        const="",
        default=None,
        metavar="PROVIDER",
        help="run pi's own login (`pi auth login`) here and exit (asks the provider if not given)",
    )
    demo = sub.add_parser("demo", help="show one run end to end with the built-in scripted model")
    demo.add_argument("prompt", nargs="?", default="Say hello, then run `echo hi` with bash.")
    demo.add_argument(
        "--model", default="tool", help="scripted scenario: text, thinking, tool, unicode, err500, ..."
    )
    doctor = sub.add_parser("doctor", help="check that a run could work here and how to fix what is missing")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--agent", default=argparse.SUPPRESS, help="the agent to check: pi (the default) or claude"
    )
    trust = sub.add_parser("trust", help="trust a folder's own agent settings and extensions, or say never")
    trust.add_argument("folder", nargs="?", default=".", help="the workspace (default: the current folder)")
    choice = trust.add_mutually_exclusive_group()
    choice.add_argument("--never", action="store_true", help="never trust it (the bridge asks no more)")
    choice.add_argument("--forget", action="store_true", help="forget the decision (the next prompt asks)")
    choice.add_argument("--show", action="store_true", help="print the saved decision")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `pi-bridge` console script and `python -m bridge`."""
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level, args.log_file)
    from bridge.process import trace  # the standard library's only

    trace.start_from_environment()
    try:
        from bridge.policy.redact import learn_the_environment
    except ImportError:  # `pi-bridge doctor` names the missing dependencies
        pass
    else:
        learn_the_environment()
    if args.command == "demo":
        return demo_main(args)
    if args.command == "acp":
        return acp_main(args)
    if args.command == "doctor":
        return doctor_main(args)
    if args.command == "trust":
        return trust_main(args)
    return serve_main(args)
