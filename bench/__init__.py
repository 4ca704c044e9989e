"""The pi-bridge benchmark suite: `python -m bench` runs every benchmark and rewrites docs/benchmarks.md."""
