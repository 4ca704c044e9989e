"""The bridge's trace marks (bridge/process/trace.py), for the fronts, which see runs/ only."""

from bridge.process.trace import mark

__all__ = ["mark"]
