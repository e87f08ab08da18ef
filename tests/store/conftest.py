"""Fixtures for the store tests: stores on a temporary data dir, closed afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from syncd.store.embedded.store import FileStore
from tests.store.pgnodes import pg_db, pg_url, schema, start_node

__all__ = ["pg_db", "pg_url", "schema", "start_node"]  # PostgreSQL node fixtures

MakeStore = Callable[..., Any]


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[MakeStore]:
    """``await make_store(data_dir=..., **kwargs)`` -> an opened FileStore and what it
    recovered; every store made is closed at the end of the test."""
    stores: list[FileStore] = []

    async def make(data_dir: Path | None = None, **kwargs: Any) -> tuple[FileStore, Any]:
        store = FileStore(data_dir or tmp_path / "data", **kwargs)
        recovered = await store.open()
        stores.append(store)
        return store, recovered

    yield make
    for store in stores:
        with contextlib.suppress(Exception):
            await store.close()
