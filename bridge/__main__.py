"""`python -m bridge`: the same as the `pi-bridge` console script."""

import sys

from bridge.cli import main

sys.exit(main())
