"""The store contract's backends (embedded, memory, PostgreSQL), for the
history reads that must answer the same on every store."""

from tests.store.contract.conftest import backend, contract_pg

__all__ = ["backend", "contract_pg"]
