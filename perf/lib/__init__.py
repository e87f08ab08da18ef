"""Shared code: what the suite, the benchmarks, the studies and the tools import.

servers (syncd and the peers as subprocesses pinned to a core, tokens),
loadgen (the HTTP load generator, run as a process on the load core),
slowloris (connections that never finish a request head), proc (a server's
memory and CPU from /proc), postgres (a PostgreSQL to measure on), traces
(editing traces and their replay), table (console tables). Nothing here
measures anything by itself; see perf/README.md.
"""
