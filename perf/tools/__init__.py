"""Tools that work on benchmarks rather than measure: profile (a flame graph or
folded stacks of the server under one workload, ``make profile``),
profile_summary (folded stacks in words) and charts (PNG charts of
perf.bench.http_ops results for docs/benchmarks.md). See perf/README.md.
"""
