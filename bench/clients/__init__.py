"""Client sides the benchmarks drive the bridge, pi and ACP agents with, on the one stdio peer."""
