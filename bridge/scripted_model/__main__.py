"""`python -m bridge.scripted_model [--port N] [--agent-dir DIR]`: serve the scripted model until
SIGINT/SIGTERM, printing one JSON line (baseUrl, port) at start."""

from __future__ import annotations

import argparse
import logging
import pathlib
import signal
import sys
import threading
from types import FrameType

from bridge.scripted_model.http_server import ScriptedModelServer
from bridge.scripted_model.pi_config import write_pi_agent_dir
from bridge.scripted_model.reply import wire_json

log = logging.getLogger("bridge.scripted_model")


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; print one JSON line (baseUrl, port) at start."""
    parser = argparse.ArgumentParser(
        prog="python -m bridge.scripted_model", description="Serve the scripted model on 127.0.0.1."
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    parser.add_argument(
        "--agent-dir",
        type=pathlib.Path,
        help="also write a pi agent dir (models.json) here",
    )
    parser.add_argument(
        "--provider",
        default="fake",
        help="provider name in models.json (default: fake)",
    )
    parser.add_argument(
        "--disable-pi-retry",
        action="store_true",
        help="write settings.json turning pi retries off",
    )
    parser.add_argument(
        "--delay-scale",
        type=float,
        default=1.0,
        help="multiply per-piece delays (default 1)",
    )
    parser.add_argument(
        "--record",
        type=pathlib.Path,
        help="append every request (path, model, body, n, t) to this file as a JSON line",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with ScriptedModelServer(port=args.port, delay_scale=args.delay_scale, record_path=args.record) as server:
        if args.agent_dir is not None:
            write_pi_agent_dir(
                args.agent_dir,
                server.base_url,
                provider=args.provider,
                disable_pi_retry=args.disable_pi_retry,
            )
            log.info("wrote pi agent dir %s", args.agent_dir)
        sys.stdout.write(wire_json({"baseUrl": server.base_url, "port": server.port}) + "\n")
        sys.stdout.flush()
        while not done.wait(0.5):
            pass
        log.info("stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
