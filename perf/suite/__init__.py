"""The benchmark suite behind ``make bench`` (``python -m perf``, ``python -m perf.suite``).

It runs the benchmarks of perf/bench/ one after the other, each as a child
process that starts its own servers, and turns their figures into one table:
the workload, syncd's figure, the peer measured in the same run, the ratio,
the target from the issues, whether it was met, and whether the load
generator had headroom (a saturated generator measures itself, not the
server). Servers are pinned to core 0 and load generators to core 1
(perf.lib.servers); the in-process benchmarks (RGA traces, auth cost) are
pinned to core 0 too. When wrk is installed the HTTP servers are also
measured with it (perf.bench.http_wrk): the Python generator can saturate
before the raw uvloop peer does, which would flatter every ratio against it.

The modules, in the order a run goes through them:

- registry: the benchmarks (module, arguments, limits) and the one table of
  targets;
- driver: runs each benchmark as a child and its JSON through its adapter;
- adapters: one per benchmark, its JSON into rows judged against the targets;
- machine: the machine, its load and speed (cpu_index), the commit;
- report: the rows, the console table and perf/RESULTS.md.
"""
