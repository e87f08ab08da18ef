"""The store contract: every backend against the whole ``Store`` protocol.

The tests here are parametrised over every backend in ``backends.BACKENDS``
(FileStore, MemoryStore and PostgresStore on a throw-away PostgreSQL server
of this package's own) and drive each store through an ``Engine`` the way
``syncd/service.py`` does: ``commit(ns, id, apply)`` with the engine's plan
applied inside ``apply``, deletes through ``append``. They cover opening and
recovery, commit, ordering, deletes, load/holds/list_ids, history and
history_base, ops_since, reload, failure, close and the stats counters.

Where a backend legitimately differs (a shared store orders ops itself; a
store that loads on demand may recover nothing at open), the difference is
a field of ``backends.Traits`` and the test asserts what that backend does:
no test is skipped for a backend.

A new backend: write a harness in ``backends.py``, add it to ``BACKENDS``,
and run ``pytest tests/store/contract`` before anything else.
"""
