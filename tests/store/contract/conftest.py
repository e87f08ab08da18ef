"""The ``backend`` fixture: one test per backend, each on data of its own.

PostgreSQL runs on a throw-away server of this package's own (the failure
test stops and starts it, which must disturb no other test, and which a
server named by ``SYNCD_TEST_PG`` must never undergo), started once for the
whole package and only when a PostgreSQL test runs; each test gets a schema
of its own in one database.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.pgserver import ThrowawayPostgres, throwaway_postgres
from tests.store.contract.backends import (
    BACKENDS,
    FileHarness,
    Harness,
    MemoryHarness,
    PostgresHarness,
)

DATABASE = "contract"


@pytest.fixture(scope="package")
def contract_pg() -> Iterator[ThrowawayPostgres]:
    with throwaway_postgres() as server:
        with psycopg.connect(f"{server.url}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield server


def _schema_url(server: ThrowawayPostgres) -> str:
    schema = "s_" + secrets.token_hex(4)
    url = f"{server.url}/{DATABASE}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{url}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """A started harness (``backend.recovered``: what its first ``open`` gave)."""
    harness: Harness
    if request.param == "file":
        harness = FileHarness(tmp_path / "data")
    elif request.param == "memory":
        harness = MemoryHarness()
    else:
        server: ThrowawayPostgres = request.getfixturevalue("contract_pg")
        harness = PostgresHarness(server, _schema_url(server))
    harness.recovered = await harness.start()
    yield harness
    await harness.finish()
