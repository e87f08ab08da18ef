"""syncd's benchmarks, studies and their tools, laid out by role; see perf/README.md."""
