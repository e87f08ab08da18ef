"""Fixtures for the cluster tests: a fresh database per test (dropped afterwards),
or a whole server of the test's own for the tests that restart PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.pgdb import fresh_database
from tests.pgserver import ThrowawayPostgres, throwaway_postgres
from tests.store.pgnodes import pg_db, pg_url, schema, start_node

__all__ = ["pg_db", "pg_url", "schema", "start_node"]  # in-process nodes (test_revocations_cluster)


@pytest.fixture
def cluster_db() -> Iterator[str]:
    with fresh_database() as name:
        yield name


@pytest.fixture
def own_pg() -> Iterator[ThrowawayPostgres]:
    """A server only this test uses: restarting it disturbs no one (not even with SYNCD_TEST_PG)."""
    with throwaway_postgres() as server:
        yield server
