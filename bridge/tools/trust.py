"""`pi-bridge trust`: save, show or forget a workspace's project-trust decision from a shell."""

from __future__ import annotations

import os
import sys

from bridge.agents import agent_names, build_adapter
from bridge.agents.seam import trust_roots
from bridge.policy.rule_store import state_dir
from bridge.policy.trust.trust_store import TrustStore, fingerprint


def trust_main(folder: str, *, never: bool, forget: bool, show: bool) -> int:
    """Save (trusted, or untrusted with `never`), forget or show the decision of `folder`."""
    if not os.path.isdir(folder):
        print(f"pi-bridge trust: {folder}: not a directory", file=sys.stderr)
        return 2
    cwd = os.path.realpath(folder)
    store = TrustStore(state_dir(os.environ))
    if show:
        print(f"{cwd}: {store.get(cwd) or 'no decision (the first prompt there asks)'}")
        return 0
    if forget:
        gone = store.forget(cwd)
        print(f"{cwd}: {'decision forgotten' if gone else 'had no decision'}")
        return 0
    try:
        every = (root for name in agent_names() for root in trust_roots(build_adapter(name), cwd, os.environ))
        roots = tuple(dict.fromkeys(every))
        store.set(cwd, "untrusted" if never else "trusted", config=fingerprint(roots, cwd))
    except (OSError, ValueError) as exc:
        print(f"pi-bridge trust: the decision was not saved: {exc}", file=sys.stderr)
        return 1
    print(f"{cwd}: {'never trusted' if never else 'trusted'} (from the next prompt there on)")
    return 0
