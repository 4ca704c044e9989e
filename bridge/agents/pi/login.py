"""pi's own login, run in the user's terminal: the ACP `pi-login` auth method runs `acp --login`."""

from __future__ import annotations

import subprocess
import sys

from bridge.config import command_from


def login_main(provider: str, pi_command: str | None) -> int:
    """Run pi's own login in this terminal; pi keeps the credentials it stores (~/.pi/agent/auth.json)
    and reads them at every start."""
    while not provider.strip():
        try:
            provider = input("Provider to log in to (for example anthropic, openai, openrouter): ")
        except EOFError:
            print("pi-bridge: no provider given", file=sys.stderr)
            return 2
    try:
        return subprocess.call([*command_from(pi_command), "auth", "login", provider.strip()])
    except OSError as error:
        print(f"pi-bridge: cannot run pi: {error}", file=sys.stderr)
        return 127
