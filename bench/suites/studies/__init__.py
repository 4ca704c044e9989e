"""Benchmarks run by hand for one question each, outside the report (`python -m bench NAME`)."""
