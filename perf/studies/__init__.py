"""Studies: measurements run by hand to answer one question (what a backup,
TLS, history or the memory budget costs; whether memory stays flat under a
soak; how the CRDT code compares on one editing trace). They are not part of
``make bench``; their figures are written up where the question was asked
(docs/, perf/studies/WORKING_SET.md, perf/profiles/README.md). See
perf/README.md.
"""
