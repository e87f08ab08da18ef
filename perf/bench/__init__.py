"""The suite's benchmarks: each one a script that starts its own servers,
measures, prints a table and, with ``--json FILE``, writes its figures for
the suite (perf.suite) to turn into rows of perf/RESULTS.md. Each runs alone
too: ``python -m perf.bench.<name> --help``. See perf/README.md.
"""
