"""A PostgreSQL server for the benchmarks that need one.

``SYNCD_BENCH_PG`` (or ``--pg``) names an existing server, used as it is;
without one, a throw-away server is started for the run with the tests' own
helper (tests/pgserver.py: initdb in a temporary directory, a free port,
removed afterwards) and production durability (fsync, synchronous_commit and
full_page_writes on), so what is measured is what a deployment would pay.
The machine's own PostgreSQL is never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
"""The throw-away server's settings: durable, as in production."""
SHARED_BUFFERS = "256MB"
"""Enough for the benchmarks' tables to stay in memory: they measure syncd, not the disk cache."""


@contextlib.contextmanager
def postgres_server(url: str | None) -> Iterator[str]:
    """The server's URL without a database name: ``url`` itself, or a throw-away one's."""
    if url:
        yield url.rstrip("/")
        return
    from tests.pgserver import throwaway_postgres

    with throwaway_postgres({**DURABLE, "shared_buffers": SHARED_BUFFERS}) as server:
        yield server.url


def unreachable(url: str) -> str | None:
    """None when a connection to ``url`` works, else why not (one line)."""
    try:
        import psycopg

        with psycopg.connect(f"{url}/postgres", connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
