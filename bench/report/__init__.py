"""The writer of docs/benchmarks.md and its pictures, one module per section it grew."""
