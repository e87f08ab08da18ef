"""Fixtures for the Yjs tests: in-process nodes on the suite's PostgreSQL
(the awareness relay, test_relay)."""

from __future__ import annotations

from tests.store.pgnodes import pg_db, pg_url, schema, start_node

__all__ = ["pg_db", "pg_url", "schema", "start_node"]
