"""`python -m bench [--quick]` runs every benchmark; `python -m bench NAME [ARGS]` runs one suite."""

import runpy
import sys

from bench.run_all import main
from bench.suites import find


def entry() -> int:
    """Run the suite named first on the command line, else every benchmark."""
    module = find(sys.argv[1]) if len(sys.argv) > 1 else None
    if module is None:
        return main()
    sys.argv = [f"python -m bench {sys.argv[1]}", *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


raise SystemExit(entry())
