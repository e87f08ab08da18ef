"""Fixtures for the cluster tests: a fresh database per test (dropped afterwards)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.pgdb import fresh_database


@pytest.fixture
def cluster_db() -> Iterator[str]:
    with fresh_database() as name:
        yield name
