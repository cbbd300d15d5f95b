"""Pick a JobStore implementation (the contract is coordinator/api.py)."""

from __future__ import annotations

from coordinator.api import JobStore


def open_store(url: str) -> JobStore:
    """':memory:' gives the in-memory store, anything else is an SQLite path."""
    if url == ":memory:":
        from coordinator.store_memory import MemoryJobStore

        return MemoryJobStore()
    from coordinator.store_sqlite import SqliteJobStore

    return SqliteJobStore(url)
